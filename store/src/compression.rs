//! zstd with one context per thread. Creating a context costs more than compressing or
//! decompressing a small message: a follower's read-index call and its answer, each a few
//! bytes, spent more CPU creating their four contexts than on anything else of zstd (perf,
//! hack/bench/apiserver/through-kube.sh). A context keeps no data between frames: reusing it
//! produces the same bytes as a new one.

use std::cell::RefCell;
use std::io::{self, Read};

thread_local! {
    static COMPRESSOR: RefCell<Option<(i32, zstd::bulk::Compressor<'static>)>> =
        const { RefCell::new(None) };
    static DECOMPRESSOR: RefCell<Option<zstd::bulk::Decompressor<'static>>> =
        const { RefCell::new(None) };
}

/// One zstd frame of `plain` at `level`, its content size in its header.
pub fn compress(plain: &[u8], level: i32) -> io::Result<Vec<u8>> {
    COMPRESSOR.with(|cell| {
        let mut cell = cell.borrow_mut();
        match cell.as_mut() {
            Some((current, compressor)) if *current != level => {
                compressor.set_compression_level(level)?;
                *current = level;
            }
            Some(_) => {}
            None => *cell = Some((level, zstd::bulk::Compressor::new(level)?)),
        }
        let (_, compressor) = cell
            .as_mut()
            .ok_or_else(|| io::Error::other("no context"))?;
        compressor.compress(plain)
    })
}

/// Why bytes did not decompress.
#[derive(Debug)]
pub enum Inflate {
    /// Not zstd, or damaged.
    Malformed(io::Error),
    /// More than the bound, decompressed.
    TooLarge,
}

/// The bytes `compressed` holds, at most `max` of them. A single frame that states its size
/// (every frame [`compress`] makes) is decompressed in one call into a buffer of exactly that
/// size, once the size is within the bound; anything else (several frames, no size stated) is
/// streamed and cut off one byte past the bound.
pub fn decompress(compressed: &[u8], max: usize) -> Result<Vec<u8>, Inflate> {
    if let Ok(Some(size)) = zstd::zstd_safe::get_frame_content_size(compressed) {
        if size > max as u64 {
            return Err(Inflate::TooLarge);
        }
        let whole = DECOMPRESSOR.with(|cell| -> io::Result<Vec<u8>> {
            let mut cell = cell.borrow_mut();
            if cell.is_none() {
                *cell = Some(zstd::bulk::Decompressor::new()?);
            }
            let decompressor = cell
                .as_mut()
                .ok_or_else(|| io::Error::other("no context"))?;
            decompressor.decompress(compressed, size as usize)
        });
        // A frame followed by more, or one whose header lies about its size: the stream below
        // judges it.
        if let Ok(plain) = whole
            && plain.len() as u64 == size
        {
            return Ok(plain);
        }
    }
    let decoder = zstd::stream::read::Decoder::new(compressed).map_err(Inflate::Malformed)?;
    let mut plain = Vec::new();
    decoder
        .take(max as u64 + 1)
        .read_to_end(&mut plain)
        .map_err(Inflate::Malformed)?;
    if plain.len() > max {
        return Err(Inflate::TooLarge);
    }
    Ok(plain)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reused_context_makes_the_same_frame_as_a_new_one() {
        let text = b"{\"reports\":[1,2,3],\"node\":\"node-1\"}".repeat(50);
        let fresh = zstd::bulk::compress(&text, 3).expect("compress");
        // The thread's context, used first at another level and on other bytes.
        compress(b"something else entirely", 1).expect("compress");
        assert_eq!(compress(&text, 3).expect("compress"), fresh);
        assert_eq!(decompress(&fresh, text.len()).expect("decompress"), text);
    }

    #[test]
    fn a_frame_larger_than_the_bound_is_refused_before_it_is_inflated() {
        let bomb = compress(&vec![b' '; 100_000], 1).expect("compress");
        assert!(matches!(decompress(&bomb, 99_999), Err(Inflate::TooLarge)));
        assert_eq!(
            decompress(&bomb, 100_000).expect("at the bound").len(),
            100_000
        );
    }

    #[test]
    fn a_frame_whose_header_understates_its_size_is_still_bounded() {
        // Two frames back to back: the first header states 10 bytes, the whole holds 20.
        let mut two = compress(&[b'a'; 10], 1).expect("compress");
        two.extend(compress(&[b'b'; 10], 1).expect("compress"));
        assert_eq!(decompress(&two, 20).expect("both frames").len(), 20);
        assert!(matches!(decompress(&two, 15), Err(Inflate::TooLarge)));
    }

    #[test]
    fn bytes_that_are_not_zstd_are_malformed() {
        assert!(matches!(
            decompress(b"{\"not\":\"zstd\"}", 1000),
            Err(Inflate::Malformed(_))
        ));
    }
}
