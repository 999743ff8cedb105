//! What preparing a photo for the model costs (`media::images::prepare`):
//! a 12-megapixel JPEG (4000 × 3000, a noisy gradient encoded at quality
//! 90, about the size a phone sends) decoded, scaled to 1568 px and encoded,
//! timed over several runs; and the most memory the process held while
//! doing it, above what it held before (`VmHWM` after resetting it through
//! `/proc/self/clear_refs`).
//!
//! ```text
//! cargo bench --bench media
//! ```

use std::time::{Duration, Instant};

use image::codecs::jpeg::JpegEncoder;
use image::{ImageEncoder, Rgb, RgbImage};

const RUNS: usize = 7;

fn main() {
    let photo = twelve_megapixels();
    println!("12-MP photo: {} bytes as JPEG", photo.len());
    let before = kib("VmRSS");
    reset_peak();
    let mut times: Vec<Duration> = Vec::with_capacity(RUNS);
    let mut out = 0;
    for _ in 0..RUNS {
        let start = Instant::now();
        let prepared = pincer::media::images::prepare(std::hint::black_box(&photo)).expect("a photo prepares");
        times.push(start.elapsed());
        out = prepared.data.len();
    }
    let peak = kib("VmHWM");
    times.sort();
    println!(
        "prepare (decode, scale to 1568 px, encode): median {:.0?}, p95 {:.0?} over {RUNS} runs; {out} bytes out",
        times[RUNS / 2],
        times[(RUNS * 95).div_ceil(100) - 1]
    );
    match (before, peak) {
        (Some(before), Some(peak)) => println!(
            "peak RSS while preparing: {:.1} MiB above the {:.1} MiB held before",
            peak.saturating_sub(before) as f64 / 1024.0,
            before as f64 / 1024.0
        ),
        _ => println!("peak RSS: /proc/self/status not readable here"),
    }
}

fn twelve_megapixels() -> Vec<u8> {
    let mut seed = 0x9E37_79B9_u32;
    let image = RgbImage::from_fn(4000, 3000, |x, y| {
        seed ^= seed << 13;
        seed ^= seed >> 17;
        seed ^= seed << 5;
        let noise = (seed % 24) as u8;
        Rgb([((x / 16) % 256) as u8 ^ noise, ((y / 12) % 256) as u8 ^ noise, (((x + y) / 28) % 256) as u8])
    });
    let mut out = Vec::new();
    JpegEncoder::new_with_quality(&mut out, 90)
        .write_image(image.as_raw(), 4000, 3000, image::ExtendedColorType::Rgb8)
        .expect("the photo encodes");
    out
}

/// A `/proc/self/status` field in KiB.
fn kib(field: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with(field))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// Makes `VmHWM` start again from the current RSS (Linux: `5` to `clear_refs`).
fn reset_peak() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}
