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
}
