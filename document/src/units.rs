//! Numbers as a report prints them and reads them back: bytes in binary units, durations.

/// Formats a byte count with a binary unit (KiB, MiB, GiB).
pub fn format_bytes(b: f64) -> String {
    const K: f64 = 1024.0;
    if b >= K * K * K {
        format!("{:.3} GiB", b / (K * K * K))
    } else if b >= K * K {
        format!("{:.1} MiB", b / (K * K))
    } else {
        format!("{:.1} KiB", b / K)
    }
}

/// Parses a duration printed like "1m 40s", "41s" or "2m 5s" into seconds.
pub fn parse_duration(s: &str) -> Option<f64> {
    let mut total = 0.0;
    let mut any = false;
    for part in s.split_whitespace() {
        let (num, unit) = part.split_at(part.find(|c: char| c.is_alphabetic())?);
        let v: f64 = num.parse().ok()?;
        total += match unit {
            "h" => v * 3600.0,
            "m" | "min" => v * 60.0,
            "s" => v,
            _ => return None,
        };
        any = true;
    }
    any.then_some(total)
}
