//! How keys and values appear on the command line and in `dump` files.
//!
//! Escaped text (the default) shows printable ASCII as itself and every other byte as an
//! escape: `\\`, `\t`, `\n`, `\r`, or `\xNN`. It never contains a tab or a newline, so a
//! key and a value fit on one tab-separated line, and decoding gives back the exact
//! bytes. Hex (`--hex`) is two lowercase digits per byte.

/// How bytes are written and read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Encoding {
    /// Escaped text.
    Text,
    /// Hexadecimal.
    Hex,
}

impl Encoding {
    /// The name used in `dump` headers.
    pub fn name(self) -> &'static str {
        match self {
            Encoding::Text => "text",
            Encoding::Hex => "hex",
        }
    }

    /// Encodes `bytes`.
    pub fn encode(self, bytes: &[u8]) -> String {
        match self {
            Encoding::Text => escape(bytes),
            Encoding::Hex => bytes.iter().map(|b| format!("{b:02x}")).collect(),
        }
    }

    /// Decodes `s`; `what` names it in the error ("key", "value").
    pub fn decode(self, s: &str, what: &str) -> Result<Vec<u8>, String> {
        match self {
            Encoding::Text => unescape(s).map_err(|e| format!("bad escape in {what} {s:?}: {e}")),
            Encoding::Hex => unhex(s).map_err(|e| format!("bad hex in {what} {s:?}: {e}")),
        }
    }
}

fn escape(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    for &b in bytes {
        match b {
            b'\\' => out.push_str("\\\\"),
            b'\t' => out.push_str("\\t"),
            b'\n' => out.push_str("\\n"),
            b'\r' => out.push_str("\\r"),
            0x20..=0x7e => out.push(b as char),
            _ => out.push_str(&format!("\\x{b:02x}")),
        }
    }
    out
}

fn unescape(s: &str) -> Result<Vec<u8>, String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] != b'\\' {
            out.push(b[i]);
            i += 1;
            continue;
        }
        let Some(&c) = b.get(i + 1) else {
            return Err("a lone backslash at the end".into());
        };
        match c {
            b'\\' => out.push(b'\\'),
            b't' => out.push(b'\t'),
            b'n' => out.push(b'\n'),
            b'r' => out.push(b'\r'),
            b'x' => {
                let hex = s.get(i + 2..i + 4).ok_or("\\x needs two hex digits")?;
                out.push(u8::from_str_radix(hex, 16).map_err(|_| "\\x needs two hex digits")?);
                i += 2;
            }
            other => return Err(format!("unknown escape \\{}", other as char)),
        }
        i += 2;
    }
    Ok(out)
}

fn unhex(s: &str) -> Result<Vec<u8>, String> {
    if !s.len().is_multiple_of(2) {
        return Err("an odd number of digits".into());
    }
    (0..s.len())
        .step_by(2)
        .map(|i| {
            s.get(i..i + 2)
                .and_then(|d| u8::from_str_radix(d, 16).ok())
                .ok_or_else(|| format!("not a hex digit pair at {i}"))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_byte_round_trips_in_both_encodings() {
        let all: Vec<u8> = (0..=255).collect();
        for enc in [Encoding::Text, Encoding::Hex] {
            let s = enc.encode(&all);
            assert!(!s.contains('\t') && !s.contains('\n'));
            assert_eq!(enc.decode(&s, "key").unwrap(), all);
        }
        assert_eq!(Encoding::Text.encode(b"a b\\c\x01"), "a b\\\\c\\x01");
        assert_eq!(Encoding::Hex.encode(b"\x00\xff"), "00ff");
    }

    #[test]
    fn malformed_input_is_refused_with_a_reason() {
        for bad in ["\\", "\\q", "\\x1", "\\xzz"] {
            let e = Encoding::Text.decode(bad, "key").unwrap_err();
            assert!(e.contains("bad escape in key"), "{e}");
        }
        for bad in ["abc", "zz", "0g"] {
            let e = Encoding::Hex.decode(bad, "value").unwrap_err();
            assert!(e.contains("bad hex in value"), "{e}");
        }
        assert_eq!(Encoding::Hex.decode("", "key").unwrap(), b"");
    }
}
