//! Resolution policies: where a launch configuration comes from.
//!
//! | policy | order |
//! | --- | --- |
//! | [`Policy::Serve`] (default) | memo -> baked table -> analytic default; never searches |
//! | [`Policy::Online`] | memo -> disk cache -> search now and persist -> analytic default |
//! | [`Policy::DefaultOnly`] | analytic default |
//!
//! [`resolve_in_order`] walks a policy's [`Step`]s over any [`ResolutionSteps`], so the
//! order is one piece of code, tested without a GPU; the runtime supplies the steps.

use std::fmt;
use std::str::FromStr;

use tuned::{Resolved, Source};

use crate::Error;

/// The environment variable that picks the policy: `serve`, `online` or `default`.
pub const TUNING_ENV: &str = "KERNELS_TUNING";

/// The environment variable that turns programmatic dependent launch on (`1`) or off
/// (`0`, unset or empty) for [`crate::RuntimeOptions::from_env`] (CUDA runtimes).
pub const PDL_ENV: &str = "KERNELS_PDL";

/// The value of `KERNELS_PDL`, a boolean flag read like every other
/// ([`tuned::parse_flag`]: `1`/`true`/`yes`/`on` or `0`/`false`/`no`/`off`, any case,
/// spaces trimmed; empty is off). Anything else is an error naming `KERNELS_PDL`.
pub fn parse_pdl(value: &str) -> Result<bool, Error> {
    tuned::parse_flag(PDL_ENV, value).map_err(|e| Error::invalid(PDL_ENV, format!("{e}")))
}

/// `KERNELS_PDL` from the environment ([`parse_pdl`]); unset is off.
pub fn pdl_from_env() -> Result<bool, Error> {
    tuned::env_flag(PDL_ENV).map_err(|e| Error::invalid(PDL_ENV, format!("{e}")))
}

/// How configs are resolved.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Policy {
    /// Production: memo, baked table, analytic default. O(1), never searches.
    #[default]
    Serve,
    /// Development: memo, disk cache, a search run now (persisted), analytic default
    /// when the search fails.
    Online,
    /// The analytic default only (determinism checks, A/B against tables).
    DefaultOnly,
}

/// One place a config can come from, in the order a policy consults them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Step {
    Memo,
    Table,
    DiskCache,
    Search,
    Default,
}

impl Policy {
    /// The policy's name as `KERNELS_TUNING` spells it.
    pub const fn name(self) -> &'static str {
        match self {
            Policy::Serve => "serve",
            Policy::Online => "online",
            Policy::DefaultOnly => "default",
        }
    }

    /// The steps the policy consults, in order.
    pub const fn steps(self) -> &'static [Step] {
        match self {
            Policy::Serve => &[Step::Memo, Step::Table, Step::Default],
            Policy::Online => &[Step::Memo, Step::DiskCache, Step::Search, Step::Default],
            Policy::DefaultOnly => &[Step::Default],
        }
    }

    /// The policy named by `KERNELS_TUNING`; unset or empty is [`Policy::Serve`], an
    /// unknown value is an error naming it.
    pub fn from_env() -> Result<Policy, Error> {
        match std::env::var(TUNING_ENV) {
            Ok(v) if !v.trim().is_empty() => v.parse(),
            Ok(_) | Err(std::env::VarError::NotPresent) => Ok(Policy::Serve),
            Err(std::env::VarError::NotUnicode(v)) => Err(Error::BadPolicy(v.to_string_lossy().into_owned())),
        }
    }
}

impl FromStr for Policy {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "serve" => Ok(Policy::Serve),
            "online" => Ok(Policy::Online),
            "default" | "default-only" => Ok(Policy::DefaultOnly),
            _ => Err(Error::BadPolicy(s.to_string())),
        }
    }
}

impl fmt::Display for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The places a resolution can look, supplied by the runtime (or a test).
pub trait ResolutionSteps<C> {
    /// This process's memo (keeps the source it was first resolved from).
    fn memo(&mut self) -> Option<Resolved<C>>;
    /// The baked table (exact or nearest batch).
    fn table(&mut self) -> Option<Resolved<C>>;
    /// The online tuning cache on disk.
    fn disk_cache(&mut self) -> Option<C>;
    /// A search run now; persists its result itself. The error says why it failed.
    fn search(&mut self) -> Result<C, String>;
    /// The analytic default.
    fn analytic_default(&mut self) -> C;
    /// Called once with a resolution that did not come from the memo.
    fn remember(&mut self, resolved: &Resolved<C>);
}

/// A resolution, and the search failure that made it fall back, if any.
#[derive(Clone, Debug, PartialEq)]
pub struct Outcome<C> {
    pub resolved: Resolved<C>,
    /// Set when a search ran and failed (the config is then the analytic default).
    pub failure: Option<String>,
}

/// Resolves a config by walking `policy`'s steps over `steps`. Never panics; the
/// analytic default ends every policy.
pub fn resolve_in_order<C: Clone>(policy: Policy, steps: &mut impl ResolutionSteps<C>) -> Outcome<C> {
    let mut failure = None;
    for step in policy.steps() {
        let found = match step {
            Step::Memo => {
                if let Some(r) = steps.memo() {
                    return Outcome {
                        resolved: r,
                        failure: None,
                    };
                }
                None
            }
            Step::Table => steps.table(),
            Step::DiskCache => steps.disk_cache().map(|config| Resolved {
                config,
                source: Source::OnlineCache,
            }),
            Step::Search => match steps.search() {
                Ok(config) => Some(Resolved {
                    config,
                    source: Source::OnlineSearch,
                }),
                Err(e) => {
                    failure = Some(e);
                    None
                }
            },
            Step::Default => Some(Resolved {
                config: steps.analytic_default(),
                source: Source::Default,
            }),
        };
        if let Some(resolved) = found {
            steps.remember(&resolved);
            return Outcome { resolved, failure };
        }
    }
    // Every policy ends with Step::Default, which always answers.
    unreachable!("policy {policy} has no default step")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pdl_values_parse_and_a_bad_one_names_the_variable() {
        for on in ["1", "on", " TRUE ", "On", "yes"] {
            assert!(parse_pdl(on).unwrap(), "{on}");
        }
        for off in ["", "0", "off", "False", "  "] {
            assert!(!parse_pdl(off).unwrap(), "{off}");
        }
        let e = parse_pdl("yes please").unwrap_err().to_string();
        assert!(e.contains("KERNELS_PDL") && e.contains("`yes please`"), "{e}");
    }

    /// Steps that answer as configured and log what was consulted.
    #[derive(Default)]
    struct Fake {
        memo: Option<u32>,
        table: Option<u32>,
        disk: Option<u32>,
        search: Option<Result<u32, String>>,
        log: Vec<&'static str>,
        remembered: Vec<(u32, &'static str)>,
    }

    impl ResolutionSteps<u32> for Fake {
        fn memo(&mut self) -> Option<Resolved<u32>> {
            self.log.push("memo");
            self.memo.map(|config| Resolved {
                config,
                source: Source::TableExact,
            })
        }
        fn table(&mut self) -> Option<Resolved<u32>> {
            self.log.push("table");
            self.table.map(|config| Resolved {
                config,
                source: Source::TableExact,
            })
        }
        fn disk_cache(&mut self) -> Option<u32> {
            self.log.push("disk");
            self.disk
        }
        fn search(&mut self) -> Result<u32, String> {
            self.log.push("search");
            self.search
                .clone()
                .unwrap_or_else(|| Err("no search configured".into()))
        }
        fn analytic_default(&mut self) -> u32 {
            self.log.push("default");
            0
        }
        fn remember(&mut self, r: &Resolved<u32>) {
            self.remembered.push((r.config, r.source.name()));
        }
    }

    fn all_answer() -> Fake {
        Fake {
            memo: None,
            table: Some(1),
            disk: Some(2),
            search: Some(Ok(3)),
            ..Fake::default()
        }
    }

    #[test]
    fn serve_is_memo_table_default_and_never_searches() {
        let mut f = all_answer();
        let o = resolve_in_order(Policy::Serve, &mut f);
        assert_eq!((o.resolved.config, o.resolved.source), (1, Source::TableExact));
        assert_eq!(f.log, ["memo", "table"]);
        assert_eq!(f.remembered, [(1, "table-exact")]);

        let mut f = Fake {
            table: None,
            ..all_answer()
        };
        let o = resolve_in_order(Policy::Serve, &mut f);
        assert_eq!((o.resolved.config, o.resolved.source), (0, Source::Default));
        assert_eq!(
            f.log,
            ["memo", "table", "default"],
            "serve must not touch disk or search"
        );
    }

    #[test]
    fn memo_answers_first_and_is_not_re_remembered() {
        for p in [Policy::Serve, Policy::Online] {
            let mut f = Fake {
                memo: Some(9),
                ..all_answer()
            };
            let o = resolve_in_order(p, &mut f);
            assert_eq!(o.resolved.config, 9);
            assert_eq!(f.log, ["memo"]);
            assert!(f.remembered.is_empty());
        }
    }

    #[test]
    fn online_is_memo_disk_search_default() {
        let mut f = all_answer();
        let o = resolve_in_order(Policy::Online, &mut f);
        assert_eq!((o.resolved.config, o.resolved.source), (2, Source::OnlineCache));
        assert_eq!(f.log, ["memo", "disk"], "online must not consult the baked table");

        let mut f = Fake {
            disk: None,
            ..all_answer()
        };
        let o = resolve_in_order(Policy::Online, &mut f);
        assert_eq!((o.resolved.config, o.resolved.source), (3, Source::OnlineSearch));
        assert_eq!(f.log, ["memo", "disk", "search"]);
        assert_eq!(o.failure, None);
        assert_eq!(f.remembered, [(3, "online-search")]);
    }

    #[test]
    fn online_search_failure_falls_back_to_default_and_reports() {
        let mut f = Fake {
            disk: None,
            search: Some(Err("every candidate failed".into())),
            ..all_answer()
        };
        let o = resolve_in_order(Policy::Online, &mut f);
        assert_eq!((o.resolved.config, o.resolved.source), (0, Source::Default));
        assert_eq!(o.failure.as_deref(), Some("every candidate failed"));
        assert_eq!(f.log, ["memo", "disk", "search", "default"]);
    }

    #[test]
    fn default_only_consults_nothing_else() {
        let mut f = Fake {
            memo: Some(9),
            ..all_answer()
        };
        let o = resolve_in_order(Policy::DefaultOnly, &mut f);
        assert_eq!((o.resolved.config, o.resolved.source), (0, Source::Default));
        assert_eq!(f.log, ["default"]);
    }

    #[test]
    fn policy_names_parse_and_unknown_is_an_error_naming_it() {
        for p in [Policy::Serve, Policy::Online, Policy::DefaultOnly] {
            assert_eq!(p.name().parse::<Policy>().unwrap(), p);
        }
        assert_eq!(" Online ".parse::<Policy>().unwrap(), Policy::Online);
        let e = "fastest".parse::<Policy>().unwrap_err();
        assert!(e.to_string().contains("`fastest`"), "{e}");
        assert!(e.to_string().contains("KERNELS_TUNING"), "{e}");
    }
}
