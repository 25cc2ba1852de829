//! GPU targets a table can be tuned for, and the forms devices and users write them in.

use std::fmt;
use std::str::FromStr;

/// A GPU architecture that owns its own tuned tables.
///
/// Parsed from what devices report and users type:
///
/// ```
/// use tuned::Target;
/// assert_eq!("sm_90a".parse::<Target>().unwrap(), Target::Sm90);
/// assert_eq!("9.0".parse::<Target>().unwrap(), Target::Sm90);
/// assert_eq!("gfx942:sramecc+:xnack-".parse::<Target>().unwrap(), Target::Gfx942);
/// assert!("sm_75".parse::<Target>().is_err());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Target {
    /// NVIDIA Ampere (A100): compute capability 8.0.
    Sm80,
    /// NVIDIA Hopper (H100, H200): compute capability 9.0.
    Sm90,
    /// AMD CDNA2 (MI210, MI250).
    Gfx90a,
    /// AMD CDNA3 (MI300X).
    Gfx942,
    /// AMD CDNA4 (MI355X).
    Gfx950,
}

/// Which vendor's toolchain a target belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Vendor {
    Nvidia,
    Amd,
}

impl Target {
    /// Every target, in a fixed order (the order of cargo features and table listings).
    pub const ALL: [Target; 5] = [
        Target::Sm80,
        Target::Sm90,
        Target::Gfx90a,
        Target::Gfx942,
        Target::Gfx950,
    ];

    /// The canonical name: the cargo feature and the table file stem (`sm90`, `gfx942`).
    pub const fn name(self) -> &'static str {
        match self {
            Target::Sm80 => "sm80",
            Target::Sm90 => "sm90",
            Target::Gfx90a => "gfx90a",
            Target::Gfx942 => "gfx942",
            Target::Gfx950 => "gfx950",
        }
    }

    pub const fn vendor(self) -> Vendor {
        match self {
            Target::Sm80 | Target::Sm90 => Vendor::Nvidia,
            Target::Gfx90a | Target::Gfx942 | Target::Gfx950 => Vendor::Amd,
        }
    }

    /// Threads per warp (NVIDIA) or wavefront (AMD CDNA).
    pub const fn warp_size(self) -> u32 {
        match self.vendor() {
            Vendor::Nvidia => 32,
            Vendor::Amd => 64,
        }
    }

    /// SMs (compute units on AMD) of the reference device the analytic defaults are
    /// written for: H100/H200 (132), A100 (108), one MI250X die (104), MI300X (304),
    /// MI355X (256). A heuristic's guess at how many blocks fill the GPU; the tables
    /// and the runtime use the device's own count.
    pub const fn reference_sm_count(self) -> u32 {
        match self {
            Target::Sm90 => 132,
            Target::Sm80 => 108,
            Target::Gfx90a => 104,
            Target::Gfx942 => 304,
            Target::Gfx950 => 256,
        }
    }

    /// The architecture flag run-time compilers take (`sm_90a` so Hopper-only
    /// instructions are available; `gfx942` for hipRTC).
    pub const fn compile_arch(self) -> &'static str {
        match self {
            Target::Sm80 => "sm_80",
            Target::Sm90 => "sm_90a",
            Target::Gfx90a => "gfx90a",
            Target::Gfx942 => "gfx942",
            Target::Gfx950 => "gfx950",
        }
    }

    /// The target of a CUDA device of compute capability `major.minor`, if one is tuned for.
    pub fn from_compute_capability(major: i32, minor: i32) -> Result<Target, TargetError> {
        match (major, minor) {
            (8, 0) => Ok(Target::Sm80),
            (9, 0) => Ok(Target::Sm90),
            _ => Err(TargetError(format!("{major}.{minor}"))),
        }
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A target string that names no known target.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown target `{0}` (known: sm80, sm90, gfx90a, gfx942, gfx950; also sm_90a, 9.0, gfx942:sramecc+:xnack-)")]
pub struct TargetError(pub String);

impl FromStr for Target {
    type Err = TargetError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = || TargetError(s.to_string());
        let t = s.trim().to_ascii_lowercase();
        // AMD: gcnArchName carries feature flags after the first ':'.
        if t.starts_with("gfx") {
            let arch = t.split(':').next().unwrap_or("");
            return match arch {
                "gfx90a" => Ok(Target::Gfx90a),
                "gfx942" => Ok(Target::Gfx942),
                "gfx950" => Ok(Target::Gfx950),
                _ => Err(err()),
            };
        }
        // "9.0" as compute capability.
        if let Some((maj, min)) = t.split_once('.') {
            let maj: i32 = maj.parse().map_err(|_| err())?;
            let min: i32 = min.parse().map_err(|_| err())?;
            return Target::from_compute_capability(maj, min).map_err(|_| err());
        }
        // "sm90", "sm_90", "sm_90a", "compute_90".
        let digits = t
            .strip_prefix("sm_")
            .or_else(|| t.strip_prefix("sm"))
            .or_else(|| t.strip_prefix("compute_"))
            .ok_or_else(err)?;
        let digits = digits.strip_suffix('a').unwrap_or(digits);
        match digits {
            "80" => Ok(Target::Sm80),
            "90" => Ok(Target::Sm90),
            _ => Err(err()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_written_form() {
        for (s, t) in [
            ("sm80", Target::Sm80),
            ("sm_80", Target::Sm80),
            ("8.0", Target::Sm80),
            ("sm90", Target::Sm90),
            ("SM_90A", Target::Sm90),
            ("compute_90", Target::Sm90),
            ("9.0", Target::Sm90),
            ("gfx90a", Target::Gfx90a),
            ("gfx90a:sramecc+:xnack-", Target::Gfx90a),
            ("gfx942:sramecc+:xnack-", Target::Gfx942),
            ("gfx950", Target::Gfx950),
        ] {
            assert_eq!(s.parse::<Target>().unwrap(), t, "{s}");
        }
    }

    #[test]
    fn unknown_targets_name_the_value() {
        for s in ["sm_75", "8.6", "gfx1100", "", "sm", "9.x", "h200"] {
            let e = s.parse::<Target>().unwrap_err();
            assert!(e.to_string().contains(&format!("`{s}`")), "{e}");
        }
    }

    #[test]
    fn names_round_trip() {
        for t in Target::ALL {
            assert_eq!(t.name().parse::<Target>().unwrap(), t);
        }
    }
}
