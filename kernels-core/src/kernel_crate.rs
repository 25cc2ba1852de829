//! What kernel crates keyed by element type and row length (softmax, RMSNorm) share
//! on top of this runtime: the checks of a problem built from raw device addresses, the
//! pieces of their output checks' error bounds (`LAMBDA`, `reduction_depth`,
//! `output_floor`),
//! and [`tuned_row_kernel!`](crate::tuned_row_kernel), which declares such a kernel
//! with its `tuned::TunedKernel` implementation. GPU-free.

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

/// How many standard deviations a sum of independent rounding errors may reach before
/// a row kernel's output check fails: a right row fails with probability at most
/// 2 exp(-LAMBDA^2 / 2) per sum, about 2.5e-14 (Hoeffding's inequality).
pub const LAMBDA: f64 = 8.0;

/// Unit roundoff of fp32, the arithmetic of every row kernel.
pub const U32: f64 = 1.0 / 16_777_216.0;

/// The roundings a term of a row's reduction goes through on its way to the total when
/// at least `min_threads` threads share every row: a thread adds at most
/// ceil(cols / min_threads) terms in sequence, and the parts then merge in a tree of
/// depth at most ceil(log2(cols)).
pub fn reduction_depth(cols: usize, min_threads: usize) -> f64 {
    (cols.div_ceil(min_threads.max(1)) + cols.next_power_of_two().trailing_zeros() as usize) as f64
}

/// The absolute error of a row kernel's output near zero in `dtype`: fp32 results
/// below 2^-126 are flushed to 0 (f32 and bf16 share that range), and f16 rounds below
/// its smallest normal in steps of 2^-24, so half of one (2^-25).
pub fn output_floor(dtype: DType) -> f64 {
    match dtype {
        DType::F16 => DType::F16.smallest_normal() * DType::F16.unit_roundoff(),
        DType::F32 | DType::Bf16 => DType::F32.smallest_normal(),
    }
}

/// Declares unit structs (each with the attributes given, its docs) for kernels
/// whose key type has the fields `dtype: tuned::DType` and `cols: u32` (the schema's
/// key fields, in that order), and implements `tuned::TunedKernel` for each alike:
/// keys and configs convert through their own `from_values`, configs also through
/// `decode` and `values`; the analytic default, the baked table and whether a config
/// fits are the functions named. Kernels that differ in any of these take one
/// invocation each.
///
/// ```ignore
/// kernels_core::tuned_row_kernel! {
///     /// Softmax over the last dimension.
///     Softmax,
///     /// Log-softmax over the last dimension.
///     LogSoftmax {
///         key: SoftmaxKey,
///         config: SoftmaxConfig,
///         schema: schema::SOFTMAX,
///         fingerprint: baked::SOURCE_FINGERPRINT,
///         table: baked::softmax_table,
///         default: heuristic::analytic_default,
///         fits: space::fits,
///     }
/// }
/// ```
#[macro_export]
macro_rules! tuned_row_kernel {
    (
        $($(#[$attr:meta])* $ty:ident),+ {
            key: $key:ty,
            config: $config:ty,
            schema: $schema:expr,
            fingerprint: $fingerprint:expr,
            table: $table:path,
            default: $default:path,
            fits: $fits:path $(,)?
        }
    ) => {$(
        $(#[$attr])*
        pub struct $ty;

        impl $crate::tuned::TunedKernel for $ty {
            type Key = $key;
            type Config = $config;
            const SCHEMA: &'static $crate::tuned::KernelSchema = &$schema;
            const SOURCE_FINGERPRINT: &'static str = $fingerprint;

            fn key_values(key: &$key) -> $crate::tuned::KeyValues {
                $crate::tuned::KeyValues::new()
                    .push(key.dtype.name())
                    .push(key.cols as i64)
            }

            fn key_from_values(
                values: &[$crate::tuned::Value],
            ) -> ::std::result::Result<$key, ::std::string::String> {
                <$key>::from_values(values)
            }

            fn config_from_values(
                values: &[$crate::tuned::Value],
            ) -> ::std::result::Result<$config, ::std::string::String> {
                <$config>::from_values(values)
            }

            fn config_from_baked(values: &[$crate::tuned::Value]) -> ::std::option::Option<$config> {
                <$config>::decode(values)
            }

            fn config_values(config: &$config) -> ::std::vec::Vec<$crate::tuned::Value> {
                config.values()
            }

            fn analytic_default(target: $crate::tuned::Target, key: &$key, batch: u64) -> $config {
                $default(target, key, batch)
            }

            fn baked_table(
                target: $crate::tuned::Target,
            ) -> ::std::option::Option<&'static $crate::tuned::BakedTable> {
                $table(target)
            }

            fn accepts(target: $crate::tuned::Target, key: &$key, _batch: u64, config: &$config) -> bool {
                $fits(target, key, config)
            }
        }
    )+};
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
