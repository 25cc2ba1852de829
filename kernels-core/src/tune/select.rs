//! The autotuner's selection rule, as a pure function of measured times, and the
//! median the timing routine reports.

/// A candidate replaces the incumbent only when its median is more than this fraction
/// faster (2%) for a kernel shorter than [`LONG_KERNEL_US`], and more than half of it
/// (1%) from there on ([`noise_margin`]). Below about 10 us, launch jitter moves one
/// config's median by up to about 1%; a smaller margin would let noise pick configs, and
/// the analytic default (the first incumbent) would lose to configs that are not really
/// faster. Longer kernels are steadier (H200 figures in docs/results/rmsnorm.md, section
/// 5): a shift between machines moves every candidate of a search alike, so 2% there
/// would throw away measured gains of 1-2%.
pub const NOISE_THRESHOLD: f64 = 0.02;

/// The incumbent's median (us) from which [`noise_margin`] halves the threshold.
pub const LONG_KERNEL_US: f64 = 10.0;

/// The fraction by which a candidate must beat an incumbent whose median is
/// `incumbent_us`: `threshold` below [`LONG_KERNEL_US`], half of it from there on.
///
/// ```
/// use kernels_core::{tune::{noise_margin, NOISE_THRESHOLD}};
/// assert_eq!(noise_margin(NOISE_THRESHOLD, 3.0), 0.02);
/// assert_eq!(noise_margin(NOISE_THRESHOLD, 130.0), 0.01);
/// ```
pub fn noise_margin(threshold: f64, incumbent_us: f64) -> f64 {
    if incumbent_us >= LONG_KERNEL_US {
        threshold / 2.0
    } else {
        threshold
    }
}

/// What benchmarking one candidate gave.
#[derive(Clone, Debug, PartialEq)]
pub enum Measured {
    /// Median time in microseconds.
    Time(f64),
    /// It failed to compile or launch; the reason.
    Failed(String),
}

impl Measured {
    /// The time, if it ran.
    pub fn time(&self) -> Option<f64> {
        match self {
            Measured::Time(t) if t.is_finite() && *t > 0.0 => Some(*t),
            _ => None,
        }
    }
}

/// Picks the winning candidate, or `None` when every candidate failed.
///
/// The analytic default (`default_index`) is the first incumbent; the others are
/// considered in order, and one replaces the incumbent only when it is faster by more
/// than [`noise_margin`]`(threshold, incumbent)` (`threshold` a fraction:
/// [`NOISE_THRESHOLD`]; half of it for incumbents of [`LONG_KERNEL_US`] or more). Ties and near-ties keep the
/// incumbent, so the default wins unless beaten clearly, and among equals the earlier
/// candidate wins. If the default failed, the first candidate that ran is the first
/// incumbent. Failed candidates (and non-finite or non-positive times) are skipped.
///
/// ```
/// use kernels_core::{tune::{select, Measured, NOISE_THRESHOLD}};
/// let t = [Measured::Time(10.0), Measured::Time(9.9), Measured::Time(8.0)];
/// assert_eq!(select(&t, 0, NOISE_THRESHOLD), Some(2)); // 9.9 is within noise of 10.0
/// ```
pub fn select(measured: &[Measured], default_index: usize, threshold: f64) -> Option<usize> {
    let mut best: Option<(usize, f64)> = measured
        .get(default_index)
        .and_then(Measured::time)
        .map(|t| (default_index, t));
    for (i, m) in measured.iter().enumerate() {
        if i == default_index {
            continue;
        }
        let Some(t) = m.time() else { continue };
        best = match best {
            None => Some((i, t)),
            Some((_, inc)) if t < inc * (1.0 - noise_margin(threshold, inc)) => Some((i, t)),
            keep => keep,
        };
    }
    best.map(|(i, _)| i)
}

/// The median of `samples` (the mean of the middle two for an even count); `None` when
/// empty. NaNs sort last.
pub fn median(samples: &[f64]) -> Option<f64> {
    if samples.is_empty() {
        return None;
    }
    let mut v = samples.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use Measured::{Failed, Time};

    fn f() -> Measured {
        Failed("compile error".into())
    }

    #[test]
    fn noise_keeps_the_default() {
        // A short kernel: 1.5% faster is noise, the default stays
        let t = [Time(4.0), Time(3.94)];
        assert_eq!(select(&t, 0, NOISE_THRESHOLD), Some(0));
        // 2.5% faster is real
        let t = [Time(4.0), Time(3.9)];
        assert_eq!(select(&t, 0, NOISE_THRESHOLD), Some(1));
        // exactly at the threshold is not more than it
        let t = [Time(4.0), Time(3.92)];
        assert_eq!(select(&t, 0, NOISE_THRESHOLD), Some(0));
    }

    #[test]
    fn long_kernels_take_half_the_threshold() {
        // From 10 us, 1.5% faster is real, 0.5% is noise
        let t = [Time(100.0), Time(98.5)];
        assert_eq!(select(&t, 0, NOISE_THRESHOLD), Some(1));
        let t = [Time(100.0), Time(99.5)];
        assert_eq!(select(&t, 0, NOISE_THRESHOLD), Some(0));
        // exactly 1% is not more than it
        let t = [Time(100.0), Time(99.0)];
        assert_eq!(select(&t, 0, NOISE_THRESHOLD), Some(0));
        // The incumbent's time decides: 9.99 us is short, 10 us is long
        assert_eq!(noise_margin(0.02, 9.99), 0.02);
        assert_eq!(noise_margin(0.02, 10.0), 0.01);
        let t = [Time(9.99), Time(9.99 * 0.985)];
        assert_eq!(select(&t, 0, NOISE_THRESHOLD), Some(0));
        let t = [Time(10.0), Time(10.0 * 0.985)];
        assert_eq!(select(&t, 0, NOISE_THRESHOLD), Some(1));
    }

    #[test]
    fn ties_go_to_the_incumbent_then_the_earlier() {
        let t = [Time(50.0), Time(50.0), Time(50.0)];
        assert_eq!(select(&t, 0, NOISE_THRESHOLD), Some(0));
        // default not at index 0
        let t = [Time(40.0), Time(50.0), Time(40.0)];
        assert_eq!(select(&t, 1, NOISE_THRESHOLD), Some(0));
        // with a zero threshold, equal times still keep the earlier
        let t = [Time(50.0), Time(40.0), Time(40.0)];
        assert_eq!(select(&t, 0, 0.0), Some(1));
    }

    #[test]
    fn replacement_is_against_the_incumbent() {
        // B is within noise of A; C beats A clearly; D is within noise of C.
        let t = [Time(100.0), Time(99.5), Time(97.0), Time(96.6)];
        assert_eq!(select(&t, 0, NOISE_THRESHOLD), Some(2));
    }

    #[test]
    fn failures_are_skipped() {
        let t = [f(), Time(20.0), f(), Time(10.0)];
        assert_eq!(select(&t, 0, NOISE_THRESHOLD), Some(3));
        let t = [
            Time(10.0),
            f(),
            Time(f64::NAN),
            Time(-1.0),
            Time(f64::INFINITY),
            Time(0.0),
        ];
        assert_eq!(select(&t, 0, NOISE_THRESHOLD), Some(0));
        // default failed, first runner becomes incumbent, later near-tie does not replace it
        let t = [f(), Time(10.0), Time(9.95)];
        assert_eq!(select(&t, 0, NOISE_THRESHOLD), Some(1));
    }

    #[test]
    fn all_failing_gives_none() {
        assert_eq!(select(&[f(), f(), f()], 0, NOISE_THRESHOLD), None);
        assert_eq!(select(&[], 0, NOISE_THRESHOLD), None);
        assert_eq!(select(&[Time(f64::NAN)], 0, NOISE_THRESHOLD), None);
    }

    #[test]
    fn medians() {
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[3.0]), Some(3.0));
        assert_eq!(median(&[5.0, 1.0, 3.0]), Some(3.0));
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), Some(2.5));
        // one outlier does not move the median
        assert_eq!(median(&[1.0, 1.0, 1.0, 1000.0, 1.0]), Some(1.0));
    }
}
