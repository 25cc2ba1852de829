//! Row-major 2-D operands as ops receive them, and the checks every op runs before it
//! launches anything. GPU-free.

use tuned::DType;

use crate::{Error, Result};

/// A `[rows, cols]` operand whose rows start `stride` elements apart (`stride >= cols`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rows {
    pub rows: usize,
    pub cols: usize,
    /// Elements between the starts of consecutive rows.
    pub stride: usize,
}

impl Rows {
    /// A contiguous `[rows, cols]` operand.
    pub const fn contiguous(rows: usize, cols: usize) -> Rows {
        Rows {
            rows,
            cols,
            stride: cols,
        }
    }

    /// Rows `stride` elements apart.
    pub const fn strided(rows: usize, cols: usize, stride: usize) -> Rows {
        Rows { rows, cols, stride }
    }

    /// Elements from the first to one past the last element the operand covers.
    pub fn span(&self) -> Option<usize> {
        self.rows
            .checked_sub(1)?
            .checked_mul(self.stride)?
            .checked_add(self.cols)
    }

    /// Checks the operand `name` of `len` elements: at least one row and one column,
    /// `stride >= cols`, a span that fits the buffer and the kernels' 64-bit index,
    /// and `cols` within the 32-bit column index.
    pub fn check(&self, name: &str, len: usize) -> Result<()> {
        if self.rows == 0 {
            return Err(Error::invalid(
                "rows",
                format!("`{name}` has 0 rows; at least 1 is needed"),
            ));
        }
        if self.cols == 0 {
            return Err(Error::invalid(
                "cols",
                format!("`{name}` has 0 columns; at least 1 is needed"),
            ));
        }
        if self.cols > i32::MAX as usize {
            return Err(Error::invalid(
                "cols",
                format!("{} columns exceed the kernels' 32-bit column index", self.cols),
            ));
        }
        if self.stride < self.cols {
            return Err(Error::invalid(
                format!("{name}_stride"),
                format!("row stride {} is less than cols {}", self.stride, self.cols),
            ));
        }
        let span = self
            .span()
            .filter(|s| *s <= i64::MAX as usize)
            .ok_or_else(|| Error::invalid(name, "more elements than the kernels' 64-bit index holds"))?;
        if len < span {
            return Err(Error::invalid(
                name,
                format!(
                    "has {len} elements; {} rows of {} with stride {} need {span}",
                    self.rows, self.cols, self.stride
                ),
            ));
        }
        Ok(())
    }

    /// Bytes from the first to one past the last element (0 for a span that
    /// overflows, which [`Rows::check`] refuses).
    pub fn span_bytes(&self, dtype: DType) -> usize {
        self.span().and_then(|s| s.checked_mul(dtype.size())).unwrap_or(0)
    }

    /// The byte range `[start, end)` the operand covers from device address `ptr`.
    pub fn byte_range(&self, ptr: u64, dtype: DType) -> (u64, u64) {
        (ptr, ptr.saturating_add(self.span_bytes(dtype) as u64))
    }
}

/// The `DTYPE` define of the shared prelude (`kd::Dtype<DTYPE>`): 0 f32, 1 f16, 2 bf16.
pub fn dtype_define(dtype: DType) -> u32 {
    match dtype {
        DType::F32 => 0,
        DType::F16 => 1,
        DType::Bf16 => 2,
    }
}

/// The widest vector, in elements, of at most 16 bytes that divides a row of `cols`.
pub fn widest_vector(dtype: DType, cols: u32) -> u32 {
    let mut vec = (16 / dtype.size()) as u32;
    while vec > 1 && !cols.is_multiple_of(vec) {
        vec /= 2;
    }
    vec
}

/// Fails, naming `b`, when two operands' byte ranges overlap.
pub fn check_disjoint(a: (&str, (u64, u64)), b: (&str, (u64, u64))) -> Result<()> {
    let ((an, (a0, a1)), (bn, (b0, b1))) = (a, b);
    if a0 < b1 && b0 < a1 {
        return Err(Error::invalid(
            bn,
            format!("overlaps `{an}`; the kernel needs them disjoint"),
        ));
    }
    Ok(())
}

/// Fails, naming `eps`, unless it is finite and positive.
pub fn check_eps(eps: f32) -> Result<()> {
    if eps.is_finite() && eps > 0.0 {
        Ok(())
    } else {
        Err(Error::invalid(
            "eps",
            format!("must be finite and > 0, got {eps}"),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name_of(e: Error) -> String {
        match e {
            Error::InvalidArgument { name, .. } => name,
            other => panic!("not an argument error: {other}"),
        }
    }

    #[test]
    fn each_bad_shape_names_its_argument() {
        assert!(Rows::contiguous(3, 5).check("x", 15).is_ok());
        assert!(Rows::strided(3, 5, 8).check("x", 21).is_ok());
        assert_eq!(
            name_of(Rows::contiguous(0, 5).check("x", 15).unwrap_err()),
            "rows"
        );
        assert_eq!(
            name_of(Rows::contiguous(3, 0).check("x", 15).unwrap_err()),
            "cols"
        );
        assert_eq!(
            name_of(Rows::strided(3, 5, 4).check("x", 15).unwrap_err()),
            "x_stride"
        );
        assert_eq!(name_of(Rows::contiguous(3, 5).check("x", 14).unwrap_err()), "x");
        assert_eq!(
            name_of(
                Rows::strided(usize::MAX / 2, 5, 8)
                    .check("y", usize::MAX)
                    .unwrap_err()
            ),
            "y"
        );
        assert_eq!(
            name_of(Rows::contiguous(1, 1 << 31).check("x", 1 << 31).unwrap_err()),
            "cols"
        );
    }

    #[test]
    fn overlap_and_eps() {
        assert!(check_disjoint(("x", (0, 100)), ("y", (100, 200))).is_ok());
        assert_eq!(
            name_of(check_disjoint(("x", (0, 100)), ("y", (99, 200))).unwrap_err()),
            "y"
        );
        for bad in [0.0, -1e-6, f32::NAN, f32::INFINITY] {
            assert_eq!(name_of(check_eps(bad).unwrap_err()), "eps");
        }
        assert!(check_eps(1e-6).is_ok());
    }
}
