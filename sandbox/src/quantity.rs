//! Resource quantities (`500m`, `1Gi`, `2e3`) as kube-apiserver reads and writes them: the
//! parser of apimachinery's `resource.Quantity` with its error messages, exact comparison, the
//! rounding of defaulting (`SetDefaults_ResourceList` rounds up to milli) and the canonical form
//! every stored quantity is written in (`0.5` is stored as `500m`, `1024Mi` as `1Gi`).

use std::cmp::Ordering;
use std::fmt;

/// The regular expression apimachinery quotes when a quantity does not parse.
const SPLIT_RE: &str = "^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$";

/// Why a string is not a quantity, worded as apimachinery words it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum QuantityError {
    /// The string does not have the shape `<number><suffix>`.
    #[error("quantities must match the regular expression '{SPLIT_RE}'")]
    FormatWrong,
    /// The number part does not parse (or is beyond what the sandbox represents).
    #[error("unable to parse numeric part of quantity")]
    Numeric,
    /// The suffix is not one of the decimal, binary or exponent suffixes.
    #[error("unable to parse quantity's suffix")]
    Suffix,
}

/// How a quantity is written: the suffix family it was parsed with, kept when it is printed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// `12M`, `500m`, `3`.
    DecimalSi,
    /// `12Mi` (powers of 1024).
    BinarySi,
    /// `12e6`.
    DecimalExponent,
}

/// An exact quantity: `mantissa * 10^exponent`, printed in `format`.
#[derive(Clone, Copy, Debug)]
pub struct Quantity {
    mantissa: i128,
    exponent: i32,
    format: Format,
}

const NANO: i32 = -9;
const DECIMAL_SUFFIXES: &[(&str, i32)] = &[
    ("n", -9),
    ("u", -6),
    ("m", -3),
    ("", 0),
    ("k", 3),
    ("M", 6),
    ("G", 9),
    ("T", 12),
    ("P", 15),
    ("E", 18),
];
const BINARY_SUFFIXES: &[(&str, u32)] = &[
    ("Ki", 10),
    ("Mi", 20),
    ("Gi", 30),
    ("Ti", 40),
    ("Pi", 50),
    ("Ei", 60),
];

impl Quantity {
    /// Parse a quantity as `resource.ParseQuantity` does, including its quirks (a lone sign is
    /// zero, values finer than a nano round away from zero, binary values cap at 2^63-1).
    ///
    /// Errors: [`QuantityError`] with apimachinery's message. Numbers beyond 38 digits, which
    /// apimachinery keeps in arbitrary precision, are refused as [`QuantityError::Numeric`].
    pub fn parse(s: &str) -> Result<Quantity, QuantityError> {
        if s.is_empty() {
            return Err(QuantityError::FormatWrong);
        }
        let b = s.as_bytes();
        let mut pos = 0;
        let negative = match b[0] {
            b'-' => {
                pos = 1;
                true
            }
            b'+' => {
                pos = 1;
                false
            }
            _ => false,
        };
        while pos < b.len() && b[pos] == b'0' {
            pos += 1;
        }
        if pos == b.len() {
            return Ok(Quantity::zero(Format::DecimalSi));
        }
        let num_start = pos;
        while pos < b.len() && b[pos].is_ascii_digit() {
            pos += 1;
        }
        let num = &s[num_start..pos];
        let mut denom = "";
        if pos < b.len() && b[pos] == b'.' {
            pos += 1;
            let start = pos;
            while pos < b.len() && b[pos].is_ascii_digit() {
                pos += 1;
            }
            denom = &s[start..pos];
        }
        let suffix_start = pos;
        while pos < b.len() && b"eEinumkKMGTP".contains(&b[pos]) {
            pos += 1;
        }
        if pos < b.len() && (b[pos] == b'-' || b[pos] == b'+') {
            pos += 1;
        }
        while pos < b.len() && b[pos].is_ascii_digit() {
            pos += 1;
        }
        if pos < b.len() {
            return Err(QuantityError::FormatWrong);
        }
        let (format, exponent) = interpret_suffix(&s[suffix_start..])?;
        let digits = format!("{num}{denom}");
        let digits = digits.trim_start_matches('0');
        let mut mantissa: i128 = if digits.is_empty() {
            0
        } else {
            digits.parse().map_err(|_| QuantityError::Numeric)?
        };
        let mut exp = -(denom.len() as i32);
        match format {
            Format::BinarySi => {
                let factor = 1i128
                    .checked_shl(exponent as u32)
                    .ok_or(QuantityError::Numeric)?;
                mantissa = mantissa.checked_mul(factor).ok_or(QuantityError::Numeric)?;
            }
            _ => exp += exponent,
        }
        let mut q = Quantity {
            mantissa: if negative { -mantissa } else { mantissa },
            exponent: exp,
            format,
        };
        q.round_up_to(NANO);
        if format == Format::BinarySi {
            let cap = Quantity::from_i128(i128::from(i64::MAX), Format::BinarySi);
            if q.abs_cmp(&cap) == Ordering::Greater {
                q = Quantity {
                    mantissa: if negative {
                        -cap.mantissa
                    } else {
                        cap.mantissa
                    },
                    ..cap
                };
            }
            let one = Quantity::from_i128(1, Format::DecimalSi);
            if !q.is_zero() && q.abs_cmp(&one) == Ordering::Less {
                q.format = Format::DecimalSi;
            }
        }
        Ok(q)
    }

    fn zero(format: Format) -> Quantity {
        Quantity {
            mantissa: 0,
            exponent: 0,
            format,
        }
    }

    fn from_i128(v: i128, format: Format) -> Quantity {
        Quantity {
            mantissa: v,
            exponent: 0,
            format,
        }
    }

    /// Whether the value is zero.
    pub fn is_zero(&self) -> bool {
        self.mantissa == 0
    }

    /// Whether the value is below zero.
    pub fn is_negative(&self) -> bool {
        self.mantissa < 0
    }

    /// The sum of two quantities, in this one's format; at the largest representable magnitude
    /// when it overflows.
    pub fn saturating_add(&self, other: &Quantity) -> Quantity {
        let e = self.exponent.min(other.exponent);
        let scale = |q: &Quantity| {
            10i128
                .checked_pow((q.exponent - e) as u32)
                .and_then(|f| q.mantissa.checked_mul(f))
        };
        let mantissa = match (scale(self), scale(other)) {
            (Some(a), Some(b)) => a.saturating_add(b),
            _ => i128::MAX,
        };
        Quantity {
            mantissa,
            exponent: e,
            format: self.format,
        }
    }

    /// Whether the value is a whole number (apimachinery's `MilliValue() % 1000 == 0`).
    pub fn is_integer(&self) -> bool {
        let mut q = *self;
        q.round_up_to(-3);
        q.exponent >= 0 || q.mantissa % 10i128.pow((-q.exponent) as u32) == 0
    }

    /// Round away from zero to `10^scale` (`Quantity.RoundUp`): defaulting rounds resource
    /// lists up to milli, so `0.0001` CPU is stored as `1m`.
    pub fn round_up_to(&mut self, scale: i32) {
        if self.exponent >= scale {
            return;
        }
        let shift = (scale - self.exponent) as u32;
        let Some(div) = 10i128.checked_pow(shift) else {
            self.mantissa = self.mantissa.signum();
            self.exponent = scale;
            return;
        };
        let (q, r) = (self.mantissa / div, self.mantissa % div);
        self.mantissa = q + r.signum();
        self.exponent = scale;
    }

    fn abs_cmp(&self, other: &Quantity) -> Ordering {
        let a = Quantity {
            mantissa: self.mantissa.abs(),
            ..*self
        };
        let b = Quantity {
            mantissa: other.mantissa.abs(),
            ..*other
        };
        a.cmp(&b)
    }

    /// The canonical string kube-apiserver stores and prints (`Quantity.String()`): the largest
    /// exponent that keeps the mantissa whole, in the quantity's own suffix family.
    pub fn canonical(&self) -> String {
        if self.is_zero() {
            return "0".into();
        }
        let mut format = self.format;
        if format == Format::BinarySi {
            let limit = Quantity::from_i128(1024, Format::DecimalSi);
            if self.abs_cmp(&limit) == Ordering::Less || !self.is_whole() {
                format = Format::DecimalSi;
            }
        }
        match format {
            Format::BinarySi => {
                let mut value = self.whole_value();
                let mut power = 0;
                while power < 6 && value != 0 && value % 1024 == 0 {
                    value /= 1024;
                    power += 1;
                }
                let suffix = match power {
                    0 => "",
                    p => BINARY_SUFFIXES[p - 1].0,
                };
                format!("{value}{suffix}")
            }
            _ => {
                let (mut m, mut e) = (self.mantissa, self.exponent);
                while m % 10 == 0 {
                    m /= 10;
                    e += 1;
                }
                while e % 3 != 0 {
                    m *= 10;
                    e -= 1;
                }
                let decimal = DECIMAL_SUFFIXES.iter().find(|(_, x)| *x == e);
                match (format, decimal) {
                    (Format::DecimalSi, Some((suffix, _))) => format!("{m}{suffix}"),
                    (_, _) if e == 0 => format!("{m}"),
                    _ => format!("{m}e{e}"),
                }
            }
        }
    }

    fn is_whole(&self) -> bool {
        self.exponent >= 0 || self.mantissa % 10i128.pow((-self.exponent) as u32) == 0
    }

    fn whole_value(&self) -> i128 {
        if self.exponent >= 0 {
            self.mantissa * 10i128.pow(self.exponent as u32)
        } else {
            self.mantissa / 10i128.pow((-self.exponent) as u32)
        }
    }
}

fn interpret_suffix(suffix: &str) -> Result<(Format, i32), QuantityError> {
    if let Some((_, e)) = DECIMAL_SUFFIXES.iter().find(|(s, _)| *s == suffix) {
        return Ok((Format::DecimalSi, *e));
    }
    if let Some((_, e)) = BINARY_SUFFIXES.iter().find(|(s, _)| *s == suffix) {
        return Ok((Format::BinarySi, *e as i32));
    }
    if suffix.len() > 1 && (suffix.starts_with('e') || suffix.starts_with('E')) {
        return suffix[1..]
            .parse::<i32>()
            .map(|e| (Format::DecimalExponent, e))
            .map_err(|_| QuantityError::Suffix);
    }
    Err(QuantityError::Suffix)
}

impl PartialEq for Quantity {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Quantity {}

impl PartialOrd for Quantity {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Quantity {
    /// Exact comparison of the values (the format plays no part).
    fn cmp(&self, other: &Self) -> Ordering {
        let e = self.exponent.min(other.exponent);
        let scale = |q: &Quantity| {
            10i128
                .checked_pow((q.exponent - e) as u32)
                .and_then(|f| q.mantissa.checked_mul(f))
        };
        match (scale(self), scale(other)) {
            (Some(a), Some(b)) => a.cmp(&b),
            // Too far apart to align exactly: the magnitudes decide.
            _ => self.approx().total_cmp(&other.approx()),
        }
    }
}

impl Quantity {
    fn approx(&self) -> f64 {
        self.mantissa as f64 * 10f64.powi(self.exponent)
    }
}

impl fmt::Display for Quantity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.canonical())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn canon(s: &str) -> String {
        Quantity::parse(s)
            .unwrap_or_else(|e| panic!("{s}: {e}"))
            .canonical()
    }

    #[test]
    fn canonical_forms_match_apimachinery() {
        for (input, want) in [
            ("0", "0"),
            ("0m", "0"),
            ("-", "0"),
            ("1", "1"),
            ("1000m", "1"),
            ("1500m", "1500m"),
            ("0.5", "500m"),
            ("1.5", "1500m"),
            ("1.5k", "1500"),
            ("1000", "1k"),
            ("128974848", "128974848"),
            ("129e6", "129e6"),
            ("129M", "129M"),
            ("123Mi", "123Mi"),
            ("1024Mi", "1Gi"),
            ("1.5Gi", "1536Mi"),
            ("0.5Ki", "512"),
            ("100Ki", "100Ki"),
            ("512", "512"),
            ("1e3", "1e3"),
            ("1E3", "1e3"),
            ("12e6", "12e6"),
            ("-1", "-1"),
            ("-100m", "-100m"),
            ("1.2345", "1234500u"),
            ("0.9n", "1n"),
            ("0.0001", "100u"),
            ("+5", "5"),
            ("8Ei", "9223372036854775807"),
        ] {
            assert_eq!(canon(input), want, "{input}");
        }
    }

    #[test]
    fn malformed_quantities_fail_with_apimachinery_messages() {
        for (input, want) in [
            ("", QuantityError::FormatWrong),
            ("abc", QuantityError::FormatWrong),
            ("1x", QuantityError::FormatWrong),
            ("1.2.3", QuantityError::FormatWrong),
            ("1ki", QuantityError::Suffix),
            ("1e", QuantityError::Suffix),
            ("1m5", QuantityError::Suffix),
        ] {
            assert_eq!(Quantity::parse(input).err(), Some(want), "{input}");
        }
        assert_eq!(
            QuantityError::FormatWrong.to_string(),
            "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
        );
    }

    #[test]
    fn comparison_is_exact_across_formats() {
        let q = |s: &str| Quantity::parse(s).expect("valid");
        assert_eq!(q("1"), q("1000m"));
        assert_eq!(q("1Ki"), q("1024"));
        assert!(q("2") > q("1999m"));
        assert!(q("1Gi") > q("1G"));
        assert!(q("-1").is_negative());
        assert!(q("1E") > q("1n"));
    }

    #[test]
    fn rounding_up_to_milli_and_integers() {
        let mut q = Quantity::parse("0.0001").expect("valid");
        q.round_up_to(-3);
        assert_eq!(q.canonical(), "1m");
        let mut n = Quantity::parse("-0.0001").expect("valid");
        n.round_up_to(-3);
        assert_eq!(n.canonical(), "-1m");
        assert!(Quantity::parse("2").expect("valid").is_integer());
        assert!(!Quantity::parse("0.5").expect("valid").is_integer());
        assert!(!Quantity::parse("1.0001").expect("valid").is_integer());
    }
}
