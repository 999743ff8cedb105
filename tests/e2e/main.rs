//! End-to-end tests: pincer's engine drives the real Claude Code CLI, which
//! talks to the fake Messages API on loopback. SQLite is a real temp file.
//! One test binary, as rust-analyzer keeps its slow tests, sharing `support/`.

#[path = "../support/mod.rs"]
mod support;

mod attach;
mod backup;
mod budget_hold;
mod chat_commands;
mod cluster;
mod cluster_drain;
mod cluster_faults;
mod cluster_progress;
mod cluster_prompts;
mod cluster_status;
mod console;
mod crash;
mod daemon;
mod delivery;
mod egress;
mod fake_api;
mod fake_bot;
mod faults;
mod fd_escape;
mod files_out;
mod forwarder_fds;
mod gate;
mod gate_git;
mod gate_paths;
mod gate_skills;
mod intake;
mod lifecycle;
mod media;
mod operator;
mod orphans;
mod postgres;
mod private;
mod progress;
mod provenance;
mod proxy;
mod receive;
mod reload;
mod sandbox;
mod sandbox_hardening;
mod schedule;
mod session;
mod settings;
mod store_faults;
mod telegram;
mod tools;
mod wa_cluster;
mod wa_media;
mod whatsapp;
mod withheld_tools;
mod wrapper_preload;
