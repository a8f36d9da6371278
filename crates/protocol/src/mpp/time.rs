//! RFC 3339 timestamps as MPP writes them (`expires`, a receipt's `timestamp`): JavaScript's
//! `Date.prototype.toISOString` out, mppx's pattern
//! `^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$` in.

use super::MppError;

/// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's `days_from_civil`).
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let m = i64::from(m);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The date of a day since 1970-01-01 (H. Hinnant's `civil_from_days`).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

fn is_leap(y: i64) -> bool {
    y % 4 == 0 && (y % 100 != 0 || y % 400 == 0)
}

fn days_in_month(y: i64, m: u32) -> u32 {
    match m {
        2 if is_leap(y) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// `unix_ms` as JavaScript's `new Date(unix_ms).toISOString()` writes it:
/// `2026-11-29T09:25:32.075Z` (UTC, milliseconds, `Z`). Years past 9999 get more digits, which
/// is not RFC 3339 and which [`parse_rfc3339`] refuses.
///
/// ```
/// use tollgate_protocol::mpp::rfc3339_millis;
/// assert_eq!(rfc3339_millis(1_795_944_332_075), "2026-11-29T09:25:32.075Z");
/// ```
pub fn rfc3339_millis(unix_ms: u64) -> String {
    let secs = unix_ms / 1000;
    let days = i64::try_from(secs / 86_400).expect("u64 seconds / 86400 fits i64");
    let rem = secs % 86_400;
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60,
        unix_ms % 1000
    )
}

/// The Unix time, in whole seconds (rounded down), of an RFC 3339 timestamp in mppx's form:
/// `YYYY-MM-DDTHH:MM:SS`, an optional fraction of any length, then `Z` or `±HH:MM`. Refuses
/// anything else, impossible dates and times (`02-30`, `24:00`, leap second `60`), and instants
/// before 1970.
///
/// ```
/// use tollgate_protocol::mpp::parse_rfc3339;
/// assert_eq!(parse_rfc3339("2026-11-29T09:25:32.129Z").unwrap(), 1_795_944_332);
/// assert_eq!(parse_rfc3339("2026-11-29T11:25:32+02:00").unwrap(), 1_795_944_332);
/// assert!(parse_rfc3339("2026-11-29 09:25:32Z").is_err());
/// ```
pub fn parse_rfc3339(s: &str) -> Result<u64, MppError> {
    parse(s).ok_or_else(|| MppError::Timestamp(s.chars().take(64).collect()))
}

fn parse(s: &str) -> Option<u64> {
    let b = s.as_bytes();
    let num = |range: std::ops::Range<usize>| -> Option<u32> {
        let part = b.get(range)?;
        if !part.iter().all(u8::is_ascii_digit) {
            return None;
        }
        Some(part.iter().fold(0, |n, d| n * 10 + u32::from(d - b'0')))
    };
    let sep = |i: usize, c: u8| b.get(i) == Some(&c);
    if !(sep(4, b'-') && sep(7, b'-') && sep(10, b'T') && sep(13, b':') && sep(16, b':')) {
        return None;
    }
    let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (h, mi, sec) = (num(11..13)?, num(14..16)?, num(17..19)?);
    let mut i = 19;
    if sep(i, b'.') {
        let digits = b[i + 1..].iter().take_while(|c| c.is_ascii_digit()).count();
        if digits == 0 {
            return None;
        }
        i += 1 + digits;
    }
    let offset_secs: i64 = match b.get(i)? {
        b'Z' if b.len() == i + 1 => 0,
        sign @ (b'+' | b'-') if b.len() == i + 6 && sep(i + 3, b':') => {
            let (oh, om) = (num(i + 1..i + 3)?, num(i + 4..i + 6)?);
            if oh > 23 || om > 59 {
                return None;
            }
            let off = i64::from(oh * 3600 + om * 60);
            if *sign == b'+' { off } else { -off }
        }
        _ => return None,
    };
    let y = i64::from(y);
    if !(1..=12).contains(&mo)
        || d == 0
        || d > days_in_month(y, mo)
        || h > 23
        || mi > 59
        || sec > 59
    {
        return None;
    }
    let local = days_from_civil(y, mo, d) * 86_400 + i64::from(h * 3600 + mi * 60 + sec);
    u64::try_from(local - offset_secs).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn civil_days_round_trip_over_four_centuries() {
        for day in -800_000..800_000 {
            let (y, m, d) = civil_from_days(day);
            assert_eq!(days_from_civil(y, m, d), day);
        }
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
    }
}
