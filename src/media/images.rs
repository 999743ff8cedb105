//! Images made ready for the model ([`prepare`]): what a chat sent, checked,
//! turned upright, scaled to [`LONG_EDGE`] and encoded within [`MAX_BYTES`],
//! as a [`ModelImage`] the session writes as an image block. CPU work:
//! callers run it off the runtime (`spawn_blocking`).
//!
//! Everything here reads untrusted bytes. The header is read first and the
//! pixel count checked against [`MAX_PIXELS`] before a single pixel is
//! decoded, and the decoder runs under [`image::Limits`], so a crafted file
//! (a tiny PNG that claims 100,000 × 100,000 pixels) is refused without
//! allocating for it.

use std::io::Cursor;

use image::codecs::jpeg::JpegEncoder;
use image::imageops::FilterType;
use image::{DynamicImage, ImageDecoder, ImageFormat, ImageReader, Limits};

use crate::domain::media::ModelImage;

/// The long edge the model is shown: what Anthropic recommends (a larger
/// image is scaled down by the API anyway, at the same token cost).
pub const LONG_EDGE: u32 = 1568;
/// The most bytes one image block may hold: the API takes 5 MB per image,
/// counted as base64 (4/3 of this).
pub const MAX_BYTES: usize = 3_750_000;
/// The most pixels decoded (a 50-megapixel photo; 200 MB as RGBA).
pub const MAX_PIXELS: u64 = 50_000_000;
/// The longest side decoded.
pub const MAX_SIDE: u32 = 30_000;
/// What the decoder may allocate at once.
const MAX_ALLOC: u64 = 256 * 1024 * 1024;
/// JPEG qualities tried in turn until the image fits [`MAX_BYTES`].
const QUALITIES: [u8; 3] = [85, 70, 50];

/// Why an image is not shown to the model (it is still kept as a file).
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum ImageError {
    #[error("not an image pincer can read (JPEG, PNG, GIF or WebP)")]
    Unsupported,
    /// Its size, or 0 × 0 when the decoder refused it before saying.
    #[error("{} more than pincer decodes ({MAX_PIXELS} pixels, {MAX_SIDE} a side)", size_words(*width, *height))]
    TooLarge { width: u32, height: u32 },
    #[error("the image is damaged: {0}")]
    Corrupt(String),
}

/// `bytes` as the model is shown them. Every image is decoded (one that
/// does not decode is refused); one already small enough, of a type the API
/// takes and upright, then goes as it came; any other is turned upright,
/// scaled to fit [`LONG_EDGE`] and encoded as JPEG (PNG when it has
/// transparency and fits).
pub fn prepare(bytes: &[u8]) -> Result<ModelImage, ImageError> {
    let reader = ImageReader::new(Cursor::new(bytes)).with_guessed_format().map_err(|e| corrupt(&e))?;
    let format = reader.format().ok_or(ImageError::Unsupported)?;
    let media_type = match format {
        ImageFormat::Jpeg => "image/jpeg",
        ImageFormat::Png => "image/png",
        ImageFormat::Gif => "image/gif",
        ImageFormat::WebP => "image/webp",
        _ => return Err(ImageError::Unsupported),
    };
    let mut reader = reader;
    reader.limits(limits());
    let mut decoder = reader.into_decoder().map_err(|e| read_error(&e))?;
    let (width, height) = decoder.dimensions();
    if u64::from(width) * u64::from(height) > MAX_PIXELS || width.max(height) > MAX_SIDE {
        return Err(ImageError::TooLarge { width, height });
    }
    let orientation = decoder.orientation().unwrap_or(image::metadata::Orientation::NoTransforms);
    let upright = orientation == image::metadata::Orientation::NoTransforms;
    // Decoded even when it may go as it came: a file the API cannot read
    // would fail the whole turn, so only one that decodes is shown.
    let mut image = DynamicImage::from_decoder(decoder).map_err(|e| read_error(&e))?;
    if upright && width.max(height) <= LONG_EDGE && bytes.len() <= MAX_BYTES {
        return Ok(ModelImage { media_type: media_type.to_owned(), data: bytes.to_vec() });
    }
    image.apply_orientation(orientation);
    if image.width().max(image.height()) > LONG_EDGE {
        // Keeps the aspect ratio; Triangle is smooth enough at this scale and quick.
        image = image.resize(LONG_EDGE, LONG_EDGE, FilterType::Triangle);
    }
    encode(&image)
}

fn size_words(width: u32, height: u32) -> String {
    if width == 0 && height == 0 {
        "the image is".to_owned()
    } else {
        format!("{width} × {height} pixels is")
    }
}

fn limits() -> Limits {
    let mut limits = Limits::default();
    limits.max_image_width = Some(MAX_SIDE);
    limits.max_image_height = Some(MAX_SIDE);
    limits.max_alloc = Some(MAX_ALLOC);
    limits
}

/// PNG for an image with transparency when it fits, else JPEG at the
/// first quality that fits.
fn encode(image: &DynamicImage) -> Result<ModelImage, ImageError> {
    if image.color().has_alpha() {
        let mut png = Vec::new();
        image.write_to(&mut Cursor::new(&mut png), ImageFormat::Png).map_err(|e| corrupt(&e))?;
        if png.len() <= MAX_BYTES {
            return Ok(ModelImage { media_type: "image/png".into(), data: png });
        }
    }
    let rgb = image.to_rgb8();
    let mut jpeg = Vec::new();
    for quality in QUALITIES {
        jpeg.clear();
        rgb.write_with_encoder(JpegEncoder::new_with_quality(&mut jpeg, quality)).map_err(|e| corrupt(&e))?;
        if jpeg.len() <= MAX_BYTES {
            break;
        }
    }
    // At 1568 px and quality 50 a JPEG is far below the cap; the API says so if not.
    Ok(ModelImage { media_type: "image/jpeg".into(), data: jpeg })
}

/// A decoder's refusal: over a limit is [`ImageError::TooLarge`] (its size unknown here).
fn read_error(e: &image::ImageError) -> ImageError {
    match e {
        image::ImageError::Limits(_) => ImageError::TooLarge { width: 0, height: 0 },
        image::ImageError::Unsupported(_) => ImageError::Unsupported,
        other => corrupt(other),
    }
}

fn corrupt(e: &dyn std::fmt::Display) -> ImageError {
    // The decoder's words, bounded: they may quote the file.
    ImageError::Corrupt(e.to_string().chars().take(200).collect())
}

#[cfg(test)]
pub(crate) mod tests;
