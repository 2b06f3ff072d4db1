//! The plain bytes of a stored report body: the report's probe row (`probes.rs`), when it has
//! one, ahead of its JSON — `0x00 | u32 LE row length | row | JSON` — or the JSON alone (a
//! report that is not NetReach, or one stored before rows were kept; JSON never starts with
//! 0x00). One compressed value holds both, so the row costs almost no disk (its target names
//! repeat the JSON's), and a reader that wants only the row decompresses only the front.

use std::io::{self, Read};

const ROW_AHEAD: u8 = 0;

/// The plain bytes of a body.
pub fn compose(json: &[u8], row: Option<&[u8]>) -> Vec<u8> {
    match row {
        Some(row) => {
            let mut out = Vec::with_capacity(5 + row.len() + json.len());
            out.push(ROW_AHEAD);
            out.extend_from_slice(&(row.len() as u32).to_le_bytes());
            out.extend_from_slice(row);
            out.extend_from_slice(json);
            out
        }
        None => json.to_vec(),
    }
}

/// Where a body's JSON starts in its plain bytes.
pub fn json_start(plain: &[u8]) -> usize {
    if plain.first() == Some(&ROW_AHEAD) && plain.len() >= 5 {
        let len = u32::from_le_bytes([plain[1], plain[2], plain[3], plain[4]]) as usize;
        (5 + len).min(plain.len())
    } else {
        0
    }
}

/// The JSON part of a body's plain bytes.
pub fn json_of(plain: &[u8]) -> &[u8] {
    &plain[json_start(plain)..]
}

/// A body taken apart: its probe row (None when it has none), and a reader of its JSON.
pub type Split<'a> = (Option<Vec<u8>>, Box<dyn Read + 'a>);

/// Reads a body's front: its probe row, and a reader of its JSON.
pub fn split<'a>(mut reader: impl Read + 'a) -> io::Result<Split<'a>> {
    let mut first = [0u8; 1];
    if reader.read(&mut first)? == 0 {
        return Ok((None, Box::new(io::empty())));
    }
    if first[0] != ROW_AHEAD {
        return Ok((None, Box::new(io::Cursor::new(first).chain(reader))));
    }
    let mut len = [0u8; 4];
    reader.read_exact(&mut len)?;
    let mut row = vec![0u8; u32::from_le_bytes(len) as usize];
    reader.read_exact(&mut row)?;
    Ok((Some(row), Box::new(reader)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_split(plain: &[u8]) -> (Option<Vec<u8>>, Vec<u8>) {
        let (row, mut rest) = split(plain).expect("split");
        let mut json = Vec::new();
        rest.read_to_end(&mut json).expect("rest");
        (row, json)
    }

    #[test]
    fn a_row_ahead_of_the_json_comes_apart_and_plain_json_stays_whole() {
        let json = br#"{"nodeName":"n"}"#;
        let with = compose(json, Some(b"\x01row"));
        assert_eq!(json_of(&with), json);
        assert_eq!(
            read_split(&with),
            (Some(b"\x01row".to_vec()), json.to_vec())
        );
        let without = compose(json, None);
        assert_eq!(without, json);
        assert_eq!(json_of(&without), json);
        assert_eq!(read_split(&without), (None, json.to_vec()));
        assert_eq!(read_split(b""), (None, Vec::new()));
        // A truncated front is an error, not a wrong split.
        assert!(split(&with[..7]).is_err());
    }
}
