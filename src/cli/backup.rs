//! `pincer backup DIR`: a consistent copy of what pincer keeps, taken while
//! it runs (see `crate::backup`).

use std::path::Path;

use crate::config::Config;

/// Copies into `dir` and says what was copied and what was left out.
pub async fn execute(config: &Config, dir: &Path) -> anyhow::Result<()> {
    let manifest = crate::backup::run(config, dir).await?;
    let bytes: u64 = manifest.files.iter().map(|f| f.bytes).sum();
    println!(
        "backed up {} files ({}) into {}; restore: see the README's \"Backups\"",
        manifest.files.len(),
        crate::domain::media::human_bytes(bytes),
        dir.display()
    );
    if !manifest.skipped.is_empty() {
        println!("left out (not files): {}", manifest.skipped.join(", "));
    }
    Ok(())
}
