//! What kernel crates keyed by element type and row length (softmax, RMSNorm) share
//! on top of this runtime: the checks of a problem built from raw device addresses.
//! GPU-free.

use tuned::DType;

use crate::{Error, Result, Rows};

/// Checks an input and an output operand, each given as `(name, shape, elements)`:
/// each one's shape against its length ([`Rows::check`]), then that the output has
/// the input's rows and columns (the strides may differ). The error names the bad
/// operand (or `rows`, `cols`, `<name>_stride`, as [`Rows::check`] does).
pub fn check_row_operands(
    (input, in_rows, in_len): (&str, Rows, usize),
    (output, out_rows, out_len): (&str, Rows, usize),
) -> Result<()> {
    in_rows.check(input, in_len)?;
    out_rows.check(output, out_len)?;
    if (out_rows.rows, out_rows.cols) != (in_rows.rows, in_rows.cols) {
        return Err(Error::invalid(
            output,
            format!(
                "is [{}, {}] but `{input}` is [{}, {}]",
                out_rows.rows, out_rows.cols, in_rows.rows, in_rows.cols
            ),
        ));
    }
    Ok(())
}

/// Checks device addresses, each given as `(name, address)`, in order: the first that
/// is null or not a multiple of `dtype`'s size is an error naming it.
pub fn check_device_ptrs(dtype: DType, ptrs: &[(&str, u64)]) -> Result<()> {
    for &(name, p) in ptrs {
        if p == 0 {
            return Err(Error::invalid(name, "is a null device pointer"));
        }
        if p % dtype.size() as u64 != 0 {
            return Err(Error::invalid(
                name,
                format!("address {p:#x} is not aligned to its {dtype} elements"),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name_of(r: Result<()>) -> String {
        match r {
            Err(Error::InvalidArgument { name, .. }) => name,
            other => panic!("expected an argument error, got {other:?}"),
        }
    }

    #[test]
    fn row_operands_name_the_operand_that_does_not_match() {
        let s = Rows::contiguous(4, 64);
        assert!(check_row_operands(("x", s, 256), ("y", Rows::strided(4, 64, 72), 280)).is_ok());
        assert_eq!(name_of(check_row_operands(("x", s, 255), ("y", s, 256))), "x");
        assert_eq!(name_of(check_row_operands(("x", s, 256), ("y", s, 255))), "y");
        let wide = Rows::contiguous(4, 65);
        let e = check_row_operands(("x", s, 256), ("out", wide, 260)).unwrap_err();
        assert!(e.to_string().contains("is [4, 65] but `x` is [4, 64]"), "{e}");
        assert_eq!(name_of(Err(e)), "out");
    }

    #[test]
    fn device_ptrs_are_checked_in_order() {
        let ok = [("x", 0x1000), ("w", 0x2002)];
        assert!(check_device_ptrs(DType::Bf16, &ok).is_ok());
        assert_eq!(name_of(check_device_ptrs(DType::F32, &ok)), "w");
        assert_eq!(
            name_of(check_device_ptrs(DType::F32, &[("x", 0), ("w", 0x2002)])),
            "x"
        );
    }
}
