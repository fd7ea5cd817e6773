//! Cursor positions: Jupyter counts Unicode code points (protocol 5.2+), the session
//! counts bytes of UTF-8. Conversion happens here and only here, at the boundary.

/// Byte offset in `text` of the code point with index `cursor`; a cursor past the end
/// (clients do send those) clamps to `text.len()`.
pub fn byte_offset(text: &str, cursor: usize) -> usize {
    text.char_indices().nth(cursor).map_or(text.len(), |(i, _)| i)
}

/// Code-point index of byte offset `byte` in `text`; an offset inside a code point rounds
/// up past it, and one past the end clamps to the length.
pub fn char_offset(text: &str, byte: usize) -> usize {
    let byte = byte.min(text.len());
    text.char_indices().take_while(|(i, _)| *i < byte).count()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ascii_offsets_are_identical() {
        assert_eq!(byte_offset("let x", 3), 3);
        assert_eq!(char_offset("let x", 3), 3);
        assert_eq!(byte_offset("let x", 99), 5);
        assert_eq!(char_offset("let x", 99), 5);
    }

    #[test]
    fn multibyte_round_trips() {
        // 'é' is 2 bytes, '→' 3 bytes, '🦀' 4 bytes.
        let s = "é→🦀x";
        assert_eq!(byte_offset(s, 0), 0);
        assert_eq!(byte_offset(s, 1), 2);
        assert_eq!(byte_offset(s, 2), 5);
        assert_eq!(byte_offset(s, 3), 9);
        assert_eq!(byte_offset(s, 4), 10);
        for c in 0..=4 {
            assert_eq!(char_offset(s, byte_offset(s, c)), c);
        }
        // inside the crab: rounds up past it
        assert_eq!(char_offset(s, 6), 3);
    }
}
