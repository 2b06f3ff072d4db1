//! The retention flags the controller and the standalone API server share.

use std::time::Duration;

use kdoctor_store::Retention;

/// How long and how much the report store keeps, and how often that is enforced.
#[derive(clap::Args, Debug, Clone)]
pub struct RetentionArgs {
    /// How often retention runs, in minutes.
    #[arg(long = "retention-interval-minutes", default_value_t = 10,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub interval_minutes: u64,
    /// Rounds older than this many days are removed (upstream's maxAgeInDay).
    #[arg(long = "report-max-age-days", env = "ENV_CONTROLLER_REPORT_AGE_IN_DAY",
          default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=36_500))]
    pub max_age_days: u64,
    /// Above this many GiB of stored (compressed) reports the oldest rounds are removed.
    #[arg(long = "store-max-gib", default_value_t = 8,
          value_parser = clap::value_parser!(u64).range(1..=1_048_576))]
    pub max_gib: u64,
}

impl RetentionArgs {
    /// The policy the store enforces.
    pub fn policy(&self) -> Retention {
        Retention {
            max_age: Duration::from_secs(self.max_age_days * 24 * 3600),
            max_bytes: self.max_gib * 1024 * 1024 * 1024,
        }
    }

    /// How often the sweep runs.
    pub fn every(&self) -> Duration {
        Duration::from_secs(self.interval_minutes * 60)
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        retention: RetentionArgs,
    }

    #[test]
    fn defaults_are_upstreams_30_days_and_8_gib_every_10_minutes() {
        let cli = Cli::try_parse_from(["x"]).expect("parses");
        assert_eq!(cli.retention.policy(), Retention::default());
        assert_eq!(cli.retention.every(), Duration::from_secs(600));
    }

    #[test]
    fn flags_set_the_policy_and_zero_is_refused_naming_the_flag() {
        let cli = Cli::try_parse_from(["x", "--report-max-age-days", "7", "--store-max-gib", "2"])
            .expect("parses");
        let policy = cli.retention.policy();
        assert_eq!(policy.max_age, Duration::from_secs(7 * 86_400));
        assert_eq!(policy.max_bytes, 2 << 30);
        for flag in [
            "--report-max-age-days",
            "--store-max-gib",
            "--retention-interval-minutes",
        ] {
            let error = Cli::try_parse_from(["x", flag, "0"])
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            assert!(
                error.contains(flag) && error.contains("0 is not in"),
                "{flag}: {error}"
            );
        }
    }
}
