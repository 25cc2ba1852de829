//! Element types the kernels compute on.

use std::fmt;
use std::str::FromStr;

/// Storage type of a kernel's tensors (arithmetic is fp32 inside the kernels).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DType {
    F32,
    F16,
    Bf16,
}

impl DType {
    pub const ALL: [DType; 3] = [DType::F32, DType::F16, DType::Bf16];

    pub const fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F16 => "f16",
            DType::Bf16 => "bf16",
        }
    }

    /// Bytes per element.
    pub const fn size(self) -> usize {
        match self {
            DType::F32 => 4,
            DType::F16 | DType::Bf16 => 2,
        }
    }

    /// Bits of significand precision, the implicit bit included (24, 11, 8).
    pub const fn precision(self) -> u32 {
        match self {
            DType::F32 => 24,
            DType::F16 => 11,
            DType::Bf16 => 8,
        }
    }

    /// The unit roundoff, `2^-precision`: the largest relative error of rounding a
    /// normal value to this type (half an ulp at 1).
    pub fn unit_roundoff(self) -> f64 {
        (-f64::from(self.precision() as i32)).exp2()
    }

    /// The smallest positive normal value (2^-126 for f32 and bf16, 2^-14 for f16).
    pub fn smallest_normal(self) -> f64 {
        match self {
            DType::F32 | DType::Bf16 => (-126f64).exp2(),
            DType::F16 => (-14f64).exp2(),
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A dtype string that names no supported dtype.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown dtype `{0}` (known: f32, f16, bf16)")]
pub struct DTypeError(pub String);

impl FromStr for DType {
    type Err = DTypeError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "f32" | "float32" | "fp32" => Ok(DType::F32),
            "f16" | "float16" | "fp16" | "half" => Ok(DType::F16),
            "bf16" | "bfloat16" => Ok(DType::Bf16),
            _ => Err(DTypeError(s.to_string())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_rejects() {
        assert_eq!("bf16".parse::<DType>().unwrap(), DType::Bf16);
        assert_eq!("float16".parse::<DType>().unwrap(), DType::F16);
        assert_eq!("F32".parse::<DType>().unwrap(), DType::F32);
        let e = "int8".parse::<DType>().unwrap_err();
        assert!(e.to_string().contains("`int8`"));
        for d in DType::ALL {
            assert_eq!(d.name().parse::<DType>().unwrap(), d);
        }
    }

    #[test]
    fn rounding_constants_match_the_formats() {
        // 1 + unit roundoff is the midpoint between 1 and the next value: it is the
        // largest error of rounding near 1.
        assert_eq!(DType::F32.unit_roundoff(), f64::from(f32::EPSILON) / 2.0);
        assert_eq!(DType::Bf16.unit_roundoff(), 1.0 / 256.0);
        assert_eq!(DType::F16.unit_roundoff(), 1.0 / 2048.0);
        assert_eq!(DType::F32.smallest_normal(), f64::from(f32::MIN_POSITIVE));
        assert_eq!(DType::Bf16.smallest_normal(), f64::from(f32::MIN_POSITIVE));
        assert_eq!(DType::F16.smallest_normal(), 6.103515625e-5);
    }
}
