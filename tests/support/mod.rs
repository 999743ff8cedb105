//! Test support shared by the end-to-end tests and the bench: a fake Messages
//! API, where the real CLI is, and a harness that runs pincer's engine the way
//! `main` does.
#![allow(dead_code)]

pub mod bench;
pub mod cli;
pub mod cluster;
pub mod crafted;
pub mod fake_api;
pub mod fake_bot;
pub mod fake_wa;
pub mod harness;
pub mod pipe;
pub mod postgres;
pub mod relay;
pub mod resolver;
pub mod serve;
pub mod store_lock;
