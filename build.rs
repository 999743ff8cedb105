//! Builds the sandbox's wrapper (stage 0, `src/sandbox/confine/early.rs`)
//! as a static binary for pincer to embed (`confine::wrapper`): no program
//! interpreter, so no loader variable loads code into it. Plain `rustc`,
//! std only; the C library comes from its static archive (`libc.a`).

use std::path::PathBuf;
use std::process::Command;

const ROOT: &str = "src/sandbox/confine/stage0_main.rs";
const SHARED: &str = "src/sandbox/confine/early.rs";

fn main() {
    println!("cargo:rerun-if-changed={ROOT}");
    println!("cargo:rerun-if-changed={SHARED}");
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".to_owned());
    let target = std::env::var("TARGET").expect("cargo sets TARGET");
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR")).join("stage0");
    #[allow(clippy::disallowed_methods)] // the build's own compiler run, not one of pincer's processes
    let mut command = Command::new(&rustc);
    command
        .args(["--edition", "2021", "--crate-type", "bin", "--crate-name", "pincer_stage0"])
        .args(["--target", &target])
        .args(["-C", "target-feature=+crt-static", "-C", "opt-level=2", "-C", "panic=abort"])
        .args(["-C", "strip=symbols", "-C", "debuginfo=0"])
        .arg("-o")
        .arg(&out)
        .arg(ROOT);
    if let Ok(linker) = std::env::var(format!("CARGO_TARGET_{}_LINKER", target.to_uppercase().replace('-', "_"))) {
        command.arg("-C").arg(format!("linker={linker}"));
    }
    let result = command.output();
    let failed = match &result {
        Ok(output) if output.status.success() => return,
        Ok(output) => String::from_utf8_lossy(&output.stderr).into_owned(),
        Err(e) => format!("cannot run {rustc}: {e}"),
    };
    panic!(
        "\n\npincer's sandbox wrapper is linked statically and that failed for {target}.\n\
         It needs the C library's static archive (libc.a): install libc6-dev (Debian, Ubuntu) or \
         glibc-static (Fedora, RHEL), then build again.\n\nrustc said:\n{failed}\n"
    );
}
