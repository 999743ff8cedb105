//! Images built here, in memory: small ones pass, large ones are scaled,
//! sideways phone photos are turned, and crafted or broken files are refused
//! before any pixel is decoded.

use std::io::Cursor;

use image::{ImageEncoder, Rgb, RgbImage, Rgba, RgbaImage};

use super::*;

// The same crafted bytes as the end-to-end tests'.
#[path = "../../../tests/support/crafted.rs"]
mod crafted;
pub(crate) use crafted::claimed_png;

fn gradient(width: u32, height: u32) -> RgbImage {
    RgbImage::from_fn(width, height, |x, y| Rgb([(x % 256) as u8, (y % 256) as u8, ((x + y) % 256) as u8]))
}

fn png(image: &DynamicImage) -> Vec<u8> {
    let mut out = Vec::new();
    image.write_to(&mut Cursor::new(&mut out), ImageFormat::Png).unwrap();
    out
}

fn jpeg(image: &RgbImage, exif: Option<Vec<u8>>) -> Vec<u8> {
    let mut out = Vec::new();
    let mut encoder = JpegEncoder::new_with_quality(&mut out, 90);
    if let Some(exif) = exif {
        encoder.set_exif_metadata(exif).unwrap();
    }
    encoder.write_image(image.as_raw(), image.width(), image.height(), image::ExtendedColorType::Rgb8).unwrap();
    out
}

fn dimensions(prepared: &ModelImage) -> (u32, u32) {
    let format = ImageFormat::from_mime_type(&prepared.media_type).unwrap();
    image::load_from_memory_with_format(&prepared.data, format).unwrap().into_rgba8().dimensions()
}

#[test]
fn a_small_image_goes_as_it_came() {
    let bytes = png(&DynamicImage::ImageRgb8(gradient(300, 200)));
    let prepared = prepare(&bytes).unwrap();
    assert_eq!(prepared.media_type, "image/png");
    assert_eq!(prepared.data, bytes, "not re-encoded");
}

#[test]
fn a_large_photo_is_scaled_to_the_long_edge_and_encoded_as_jpeg() {
    let bytes = jpeg(&gradient(3000, 2000), None);
    let prepared = prepare(&bytes).unwrap();
    assert_eq!(prepared.media_type, "image/jpeg");
    assert_eq!(dimensions(&prepared), (LONG_EDGE, 1045), "aspect ratio kept");
    assert!(prepared.data.len() <= MAX_BYTES);
}

#[test]
fn a_large_transparent_image_stays_png() {
    let rgba = RgbaImage::from_fn(2000, 1000, |x, _| Rgba([0, 0, 0, (x % 256) as u8]));
    let prepared = prepare(&png(&DynamicImage::ImageRgba8(rgba))).unwrap();
    assert_eq!(prepared.media_type, "image/png");
    assert_eq!(dimensions(&prepared), (LONG_EDGE, 784));
}

/// A TIFF-form EXIF block with one entry: Orientation = `value`.
fn orientation_exif(value: u8) -> Vec<u8> {
    vec![
        0x4D, 0x4D, 0x00, 0x2A, 0, 0, 0, 8, // big-endian TIFF, first IFD at 8
        0, 1, // one entry
        0x01, 0x12, 0, 3, 0, 0, 0, 1, 0, value, 0, 0, // Orientation, SHORT, 1, value
        0, 0, 0, 0, // no next IFD
    ]
}

#[test]
fn a_sideways_phone_photo_is_turned_upright_even_when_small() {
    let bytes = jpeg(&gradient(40, 20), Some(orientation_exif(6)));
    let prepared = prepare(&bytes).unwrap();
    assert_ne!(prepared.data, bytes, "re-encoded, so the model sees it upright");
    assert_eq!(dimensions(&prepared), (20, 40), "rotated a quarter turn");
}

#[test]
fn a_crafted_huge_image_is_refused_from_its_header() {
    for (w, h) in [(100_000, 100_000), (20_000, 20_000), (MAX_SIDE + 1, 10)] {
        let refused = prepare(&claimed_png(w, h)).unwrap_err();
        assert!(matches!(refused, ImageError::TooLarge { .. }), "{w}×{h}: {refused:?}");
        assert!(!refused.to_string().contains("0 × 0"), "{refused}");
    }
}

#[test]
fn what_is_not_a_readable_image_says_so() {
    assert_eq!(prepare(b"%PDF-1.7 not an image"), Err(ImageError::Unsupported));
    // (A JPEG cut short after its header decodes, grey where it ends: kept as shown.)
    let mut headless = jpeg(&gradient(2000, 1000), None);
    headless.truncate(120);
    let refused = prepare(&headless).unwrap_err();
    assert!(matches!(refused, ImageError::Corrupt(_)), "{refused:?}");
    let broken = claimed_png(100, 100);
    assert!(matches!(prepare(&broken), Err(ImageError::Corrupt(_))), "pixels missing");
}

#[test]
fn the_memory_an_image_takes_is_read_from_its_header() {
    // Small, upright, of a type the API takes: only decoded (RGB, 3 bytes a pixel).
    let small = footprint(&png(&DynamicImage::ImageRgb8(gradient(300, 200)))).unwrap();
    assert_eq!(small, Footprint { width: 300, height: 200, bytes: 300 * 200 * 3 });
    assert_eq!(small.bytes, peak_bytes(300, 200, 3, Work::DecodeOnly));
    // Larger than the long edge: scaled.
    let large = footprint(&jpeg(&gradient(3000, 2000), None)).unwrap();
    assert_eq!(large.bytes, peak_bytes(3000, 2000, 3, Work::Turn { quarter: false }));
    // Sideways: a quarter turn, a copy.
    let sideways = footprint(&jpeg(&gradient(40, 20), Some(orientation_exif(6)))).unwrap();
    assert_eq!(sideways.bytes, peak_bytes(40, 20, 3, Work::Turn { quarter: true }));
    // With transparency: 4 bytes a pixel.
    let rgba = RgbaImage::from_fn(2000, 1000, |x, _| Rgba([0, 0, 0, (x % 256) as u8]));
    let clear = footprint(&png(&DynamicImage::ImageRgba8(rgba))).unwrap();
    assert_eq!(clear.bytes, peak_bytes(2000, 1000, 4, Work::Turn { quarter: false }));
    // A crafted header is refused before anything is counted or decoded.
    assert!(matches!(footprint(&claimed_png(100_000, 100_000)), Err(ImageError::TooLarge { .. })));
    assert_eq!(footprint(b"%PDF-1.7 not an image"), Err(ImageError::Unsupported));
}

#[test]
fn the_peak_counts_the_decoded_image_the_larger_of_a_turns_copy_and_the_scalings_work_and_the_result() {
    // A phone's 12-megapixel photo: decoded, sampled into a 4000 × 1176 RGBA
    // f32 image, scaled to 1568 × 1176 and copied as RGB for the encoder.
    let (decoded, sampling, result) = (4000 * 3000 * 3, 4000 * 1176 * 16, 1568 * 1176 * (3 + 3));
    assert_eq!(peak_bytes(4000, 3000, 3, Work::Turn { quarter: false }), decoded + sampling + result);
    // Turned a quarter first: the copy (as large as the decoded image) is
    // gone before the scaling starts, which samples the turned image.
    let sampling = 3000 * 1568 * 16;
    assert_eq!(peak_bytes(4000, 3000, 3, Work::Turn { quarter: true }), decoded + sampling + result);
    // Small but turned: the copy is the larger.
    assert_eq!(peak_bytes(40, 20, 3, Work::Turn { quarter: true }), 2 * 40 * 20 * 3 + 20 * 40 * 6);
    assert_eq!(peak_bytes(4000, 3000, 3, Work::DecodeOnly), decoded);
}

#[test]
fn the_default_decode_budget_holds_the_largest_image_the_limits_let_through() {
    let budget = crate::config::MediaConfig::default().decode_budget.0;
    // 50 megapixels, square (the scaling's working image is largest), RGBA, turned.
    let side = (MAX_PIXELS as f64).sqrt() as u32;
    assert!(peak_bytes(side, side, 4, Work::Turn { quarter: true }) < budget);
    // A phone photo fits four times over.
    assert!(4 * peak_bytes(4000, 3000, 3, Work::Turn { quarter: true }) < budget);
}
