//! Compact JSON text exactly as Python's `json` module writes it with `separators=(",", ":")`
//! and `ensure_ascii=False`: the same string escapes and the same float spelling (`repr`), so
//! a text written here is byte-for-byte the one Python would have stored.

use std::fmt::Write;

/// Appends `text` as a JSON string literal: `"` and `\` escaped, `\n \r \t \b \f` by name,
/// other control characters as `\u00XX`; everything else (all of Unicode) as is.
pub fn write_str(out: &mut String, text: &str) {
    out.push('"');
    let mut plain = 0; // start of the run of characters not yet copied
    for (at, byte) in text.bytes().enumerate() {
        let escape = match byte {
            b'"' => "\\\"",
            b'\\' => "\\\\",
            b'\n' => "\\n",
            b'\r' => "\\r",
            b'\t' => "\\t",
            0x08 => "\\b",
            0x0c => "\\f",
            0..=0x1f => "",
            _ => continue,
        };
        out.push_str(&text[plain..at]);
        if escape.is_empty() {
            let _ = write!(out, "\\u{byte:04x}");
        } else {
            out.push_str(escape);
        }
        plain = at + 1;
    }
    out.push_str(&text[plain..]);
    out.push('"');
}

/// Appends a float as Python's `repr` spells it (`NaN`, `Infinity` and `-Infinity` for the
/// values JSON has no number for, as Python's encoder writes them by default).
///
/// The shortest digits that read back as the same float are laid out positionally when the
/// decimal exponent is in `-4..16`, with a trailing `.0` if the value is whole, and otherwise
/// as `d.ddde±XX`.
pub fn write_f64(out: &mut String, value: f64) {
    if value.is_nan() {
        out.push_str("NaN");
        return;
    }
    if value.is_infinite() {
        out.push_str(if value > 0.0 { "Infinity" } else { "-Infinity" });
        return;
    }
    let shortest = format!("{value:e}"); // "-1.2345e-5": shortest round-trip digits
    let (mantissa, exponent) = shortest
        .split_once('e')
        .expect("`{:e}` always has an exponent");
    let exponent: i32 = exponent.parse().expect("`{:e}` writes an integer exponent");
    let (sign, mantissa) = match mantissa.strip_prefix('-') {
        Some(rest) => ("-", rest),
        None => ("", mantissa),
    };
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    out.push_str(sign);
    let point = exponent + 1; // the value is 0.<digits> × 10^point
    if (-3..=16).contains(&point) {
        if point <= 0 {
            out.push_str("0.");
            out.extend(std::iter::repeat_n('0', point.unsigned_abs() as usize));
            out.push_str(&digits);
        } else if (point as usize) < digits.len() {
            let (whole, fraction) = digits.split_at(point as usize);
            let _ = write!(out, "{whole}.{fraction}");
        } else {
            out.push_str(&digits);
            out.extend(std::iter::repeat_n('0', point as usize - digits.len()));
            out.push_str(".0");
        }
    } else {
        let (first, rest) = digits.split_at(1);
        out.push_str(first);
        if !rest.is_empty() {
            let _ = write!(out, ".{rest}");
        }
        let _ = write!(
            out,
            "e{}{:02}",
            if exponent < 0 { '-' } else { '+' },
            exponent.abs()
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn float(value: f64) -> String {
        let mut out = String::new();
        write_f64(&mut out, value);
        out
    }

    fn string(text: &str) -> String {
        let mut out = String::new();
        write_str(&mut out, text);
        out
    }

    #[test]
    fn floats_are_spelled_as_python_repr_spells_them() {
        // each pair checked against CPython 3.11's repr
        for (value, repr) in [
            (0.0, "0.0"),
            (-0.0, "-0.0"),
            (1.0, "1.0"),
            (-2.5, "-2.5"),
            (0.1, "0.1"),
            (1.0 / 3.0, "0.3333333333333333"),
            (123456.789, "123456.789"),
            (0.0001, "0.0001"),
            (0.00012, "0.00012"),
            (0.00001, "1e-05"),
            (1.5e-7, "1.5e-07"),
            (1e15, "1000000000000000.0"),
            (1234567890123456.7, "1234567890123456.8"),
            (1e16, "1e+16"),
            (1.25e17, "1.25e+17"),
            (1e100, "1e+100"),
            (5e-324, "5e-324"),
            (f64::MAX, "1.7976931348623157e+308"),
            (f64::NAN, "NaN"),
            (f64::INFINITY, "Infinity"),
            (f64::NEG_INFINITY, "-Infinity"),
        ] {
            assert_eq!(float(value), repr, "{value:e}");
        }
    }

    #[test]
    fn strings_escape_what_python_escapes_and_nothing_else() {
        assert_eq!(string("plain"), r#""plain""#);
        assert_eq!(string("say \"hi\"\\"), r#""say \"hi\"\\""#);
        assert_eq!(string("a\nb\rc\td\u{8}e\u{c}"), r#""a\nb\rc\td\be\f""#);
        assert_eq!(string("\u{0}\u{1f}"), r#""\u0000\u001f""#);
        assert_eq!(string("é 日本 🦀 \u{7f}"), "\"é 日本 🦀 \u{7f}\"");
        assert_eq!(string(""), r#""""#);
    }
}
