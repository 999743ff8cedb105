//! The root of the wrapper's static binary (stage 0, `early.rs`), built by
//! `build.rs` with the C library linked in (`+crt-static`) and embedded in
//! pincer (`confine::wrapper`). Not a module of pincer's library.
//!
//! `main` is the C one: Rust's runtime start-up (which ignores `SIGPIPE`,
//! inherited by the command) never runs.

#![no_main]

#[allow(dead_code)]
#[path = "early.rs"]
mod early;

use std::ffi::{c_char, c_int};
use std::io::Write;

extern "C" {
    fn _exit(status: c_int) -> !;
}

#[no_mangle]
pub extern "C" fn main(_argc: c_int, argv: *const *const c_char, envp: *const *const c_char) -> c_int {
    // SAFETY: the C runtime's `argv` and `envp`, NULL-terminated, for the process's life.
    let (args, env) = unsafe { (early::c_strings(argv), early::c_strings(envp)) };
    let refusal = early::stage0(&args, &env);
    let _ = writeln!(std::io::stderr(), "{}", refusal.explain());
    // SAFETY: ends the process without anyone's exit handlers.
    unsafe { _exit(early::NOT_RUN) }
}
