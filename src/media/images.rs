//! Images made ready for the model ([`prepare`]): what a chat sent, checked,
//! turned upright, scaled to [`LONG_EDGE`] and encoded within [`MAX_BYTES`],
//! as a [`ModelImage`] the session writes as an image block. CPU work:
//! callers run it off the runtime (`spawn_blocking`).
//!
//! Everything here reads untrusted bytes. The header is read first and the
//! pixel count checked against [`MAX_PIXELS`] before a single pixel is
//! decoded, and the decoder runs under [`image::Limits`], so a crafted file
//! (a tiny PNG that claims 100,000 × 100,000 pixels) is refused without
//! allocating for it. [`footprint`] reads the same header to say how much
//! memory preparing it takes, so the caller can reserve that first
//! (`media::budget`).

use std::io::Cursor;

use image::codecs::jpeg::JpegEncoder;
use image::imageops::FilterType;
use image::metadata::Orientation;
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
    /// Its size, or 0 × 0 when the decoder refused it before saying; also
    /// an image whose decoding needs more than the whole decode budget.
    #[error(
        "{} more than pincer decodes (at most {MAX_PIXELS} pixels, {MAX_SIDE} a side, and within its memory budget)",
        size_words(*width, *height)
    )]
    TooLarge { width: u32, height: u32 },
    #[error("the image is damaged: {0}")]
    Corrupt(String),
}

/// `bytes` as the model is shown them. Every image is decoded (one that
/// does not decode is refused); one already small enough, of a type the API
/// takes and upright, then goes as it came; any other is turned upright,
/// scaled to fit [`LONG_EDGE`] and encoded as JPEG (PNG when it has
/// transparency and fits). At most [`footprint`] bytes are taken meanwhile.
pub fn prepare(bytes: &[u8]) -> Result<ModelImage, ImageError> {
    let Header { decoder, media_type, width, height, orientation } = header(bytes)?;
    // Decoded even when it may go as it came: a file the API cannot read
    // would fail the whole turn, so only one that decodes is shown.
    let mut image = DynamicImage::from_decoder(decoder).map_err(|e| read_error(&e))?;
    if as_it_came(bytes, width, height, orientation) {
        return Ok(ModelImage { media_type: media_type.to_owned(), data: bytes.to_vec() });
    }
    image.apply_orientation(orientation);
    if image.width().max(image.height()) > LONG_EDGE {
        // Keeps the aspect ratio; Triangle is smooth enough at this scale and quick.
        image = image.resize(LONG_EDGE, LONG_EDGE, FilterType::Triangle);
    }
    encode(&image)
}

/// What [`prepare`] of `bytes` takes at most, read from the header alone
/// (nothing decoded): refused as [`prepare`] would refuse it before decoding.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Footprint {
    pub width: u32,
    pub height: u32,
    /// The most bytes its pixels take at once ([`peak_bytes`]).
    pub bytes: u64,
}

/// The memory [`prepare`] will take for `bytes`, from its header.
pub fn footprint(bytes: &[u8]) -> Result<Footprint, ImageError> {
    let Header { decoder, width, height, orientation, .. } = header(bytes)?;
    let per_pixel = decoder.color_type().bytes_per_pixel();
    let work = match as_it_came(bytes, width, height, orientation) {
        true => Work::DecodeOnly,
        false => Work::Turn { quarter: turns_a_quarter(orientation) },
    };
    Ok(Footprint { width, height, bytes: peak_bytes(width, height, per_pixel, work) })
}

/// What [`prepare`] does with the decoded pixels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Work {
    /// Decoded only, to see that it decodes: it goes as it came.
    DecodeOnly,
    /// Turned upright (a quarter turn makes a copy; other turns and flips
    /// are done in place), scaled when larger than [`LONG_EDGE`], encoded.
    Turn { quarter: bool },
}

/// The most bytes [`prepare`]'s pixels take at once: the decoded image
/// (`bytes_per_pixel` each), plus the larger of a quarter turn's copy and
/// the scaling's working image (the `image` crate samples columns into an
/// RGBA `f32` image as wide as the source and as high as the result), plus
/// the result and its RGB copy for the encoder. The decoder's own state and
/// the encoded bytes are small beside these and not counted.
pub fn peak_bytes(width: u32, height: u32, bytes_per_pixel: u8, work: Work) -> u64 {
    let (w, h, per_pixel) = (u64::from(width), u64::from(height), u64::from(bytes_per_pixel));
    let decoded = w * h * per_pixel;
    let Work::Turn { quarter } = work else { return decoded };
    let (w, h) = if quarter { (h, w) } else { (w, h) };
    let (scaled_w, scaled_h) = scaled(w, h);
    let copy = if quarter { decoded } else { 0 };
    let sampling = if (scaled_w, scaled_h) == (w, h) { 0 } else { w * scaled_h * 16 };
    let result = scaled_w * scaled_h * (per_pixel + 3);
    decoded + copy.max(sampling) + result
}

/// `w` × `h` fitted within [`LONG_EDGE`], as `DynamicImage::resize` does
/// (rounded; at least 1).
fn scaled(w: u64, h: u64) -> (u64, u64) {
    let long = w.max(h);
    let edge = u64::from(LONG_EDGE);
    if long <= edge {
        return (w, h);
    }
    let fit = |side: u64| ((side * edge + long / 2) / long).max(1);
    (fit(w), fit(h))
}

fn turns_a_quarter(orientation: Orientation) -> bool {
    matches!(
        orientation,
        Orientation::Rotate90 | Orientation::Rotate270 | Orientation::Rotate90FlipH | Orientation::Rotate270FlipH
    )
}

/// Small enough, upright and of a type the API takes: shown as it came.
fn as_it_came(bytes: &[u8], width: u32, height: u32, orientation: Orientation) -> bool {
    orientation == Orientation::NoTransforms && width.max(height) <= LONG_EDGE && bytes.len() <= MAX_BYTES
}

/// An image's header, read and checked; nothing decoded yet.
struct Header<'a> {
    decoder: Box<dyn ImageDecoder + 'a>,
    media_type: &'static str,
    width: u32,
    height: u32,
    orientation: Orientation,
}

fn header(bytes: &[u8]) -> Result<Header<'_>, ImageError> {
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
    let orientation = decoder.orientation().unwrap_or(Orientation::NoTransforms);
    let decoder: Box<dyn ImageDecoder + '_> = Box::new(decoder);
    Ok(Header { decoder, media_type, width, height, orientation })
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
