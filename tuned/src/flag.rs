//! The one parser of the workspace's boolean environment flags (`TUNED_STRICT`,
//! `KERNELS_REQUIRE_GPU`, `KERNELS_PDL`, `KERNELS_RETUNE`, ...): every crate reads them
//! through [`env_flag`], so each accepts the same spellings and none silently ignores a
//! value it does not understand.

/// A boolean flag's value that is neither on nor off.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FlagError {
    /// The variable.
    pub name: String,
    /// What it held.
    pub value: String,
}

impl std::fmt::Display for FlagError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}: `{}` is not a boolean (1, true, yes, on or 0, false, no, off; any case)",
            self.name, self.value
        )
    }
}

impl std::error::Error for FlagError {}

/// The value of boolean flag `name` given as `value`: `1`, `true`, `yes`, `on` are on,
/// `0`, `false`, `no`, `off` and the empty string are off (any case, surrounding
/// spaces ignored); anything else is an error naming the flag.
///
/// ```
/// assert_eq!(tuned::parse_flag("TUNED_STRICT", " Yes "), Ok(true));
/// assert_eq!(tuned::parse_flag("TUNED_STRICT", ""), Ok(false));
/// assert!(tuned::parse_flag("TUNED_STRICT", "2").is_err());
/// ```
pub fn parse_flag(name: &str, value: &str) -> Result<bool, FlagError> {
    match value.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" => Ok(true),
        "" | "0" | "false" | "no" | "off" => Ok(false),
        _ => Err(FlagError {
            name: name.to_string(),
            value: value.to_string(),
        }),
    }
}

/// Boolean flag `name` from the environment ([`parse_flag`]); unset is off.
pub fn env_flag(name: &str) -> Result<bool, FlagError> {
    match std::env::var_os(name) {
        None => Ok(false),
        Some(v) => parse_flag(name, &v.to_string_lossy()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truthy_and_falsy_spellings_in_any_case_and_garbage_is_an_error() {
        for on in ["1", "true", "TRUE", "yes", "Yes", "on", " ON "] {
            assert_eq!(parse_flag("F", on), Ok(true), "{on:?}");
        }
        for off in ["", "  ", "0", "false", "False", "no", "NO", "off"] {
            assert_eq!(parse_flag("F", off), Ok(false), "{off:?}");
        }
        for bad in ["2", "y", "enable", "1 1", "ture"] {
            let e = parse_flag("KERNELS_REQUIRE_GPU", bad).unwrap_err();
            assert_eq!(e.value, bad);
            let text = e.to_string();
            assert!(
                text.starts_with("KERNELS_REQUIRE_GPU: `") && text.contains(bad),
                "{text}"
            );
        }
    }

    #[test]
    fn the_environment_is_read_through_the_same_parser() {
        // A name no other test sets: tests in this process run in parallel.
        let name = "TUNED_FLAG_TEST_ONLY_VARIABLE";
        assert_eq!(env_flag(name), Ok(false), "unset is off");
        std::env::set_var(name, "True");
        assert_eq!(env_flag(name), Ok(true));
        std::env::set_var(name, "maybe");
        assert!(env_flag(name).is_err());
        std::env::remove_var(name);
    }
}
