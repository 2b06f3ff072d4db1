//! Schedule maths: the two forms of `spec.schedule.schedule`, planned round starts and deadlines.
//!
//! - Interval form `"M N"`: the first round starts M minutes after the controller first sees the
//!   task, each next one N minutes after the previous round's *planned* start.
//! - Cron form (5 fields: minute hour day-of-month month day-of-week, evaluated in UTC): the
//!   first round starts at the first tick strictly after the task is seen, each next one at the
//!   first tick strictly after the previous planned start.
//!
//! Fields may be separated by any run of spaces or tabs (upstream required single spaces).

use std::fmt;
use std::str::FromStr;

use jiff::tz::TimeZone;
use jiff::{SignedDuration, Timestamp, Zoned};

use crate::task::SchedulePlan;
use crate::task::common::ROUND_NUMBER_FOREVER;

/// Largest start delay or interval of the interval form, in minutes (366 days).
pub const MAX_INTERVAL_MINUTES: i64 = 366 * 24 * 60;

/// How many cron ticks are inspected to find the shortest gap between two rounds.
const CRON_GAP_SAMPLE: usize = 1000;

/// A parsed `spec.schedule.schedule`.
#[derive(Clone, Debug)]
pub enum Schedule {
    /// `"M N"`.
    Interval {
        /// Minutes from first sight of the task to the first round.
        start_after_minutes: i64,
        /// Minutes between planned round starts.
        interval_minutes: i64,
    },
    /// A 5-field cron expression, in UTC.
    Cron(Box<croner::Cron>),
}

/// Why a schedule string is not usable.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ScheduleError {
    /// Neither 2 nor 5 fields.
    #[error(
        "must be \"<start minutes> <interval minutes>\" or a 5-field cron expression, found {0} field(s)"
    )]
    FieldCount(usize),
    /// A field of the interval form is not a whole number.
    #[error("the {0} of the interval form must be a whole number of minutes, found {1:?}")]
    NotANumber(&'static str, String),
    /// A field of the interval form is out of range.
    #[error("the {0} of the interval form must be between {1} and {2} minutes, found {3}")]
    OutOfRange(&'static str, i64, i64, i64),
    /// The cron expression does not parse.
    #[error("not a valid cron expression: {0}")]
    Cron(String),
    /// The cron expression parses but never fires.
    #[error("the cron expression never fires")]
    NeverFires,
}

impl FromStr for Schedule {
    type Err = ScheduleError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let fields: Vec<&str> = text.split([' ', '\t']).filter(|f| !f.is_empty()).collect();
        match fields.len() {
            2 => {
                let start = interval_field("start delay", fields[0], 0)?;
                let interval = interval_field("interval", fields[1], 1)?;
                Ok(Schedule::Interval {
                    start_after_minutes: start,
                    interval_minutes: interval,
                })
            }
            5 => {
                let cron = croner::Cron::from_str(&fields.join(" "))
                    .map_err(|e| ScheduleError::Cron(explain_cron_error(&fields, &e)))?;
                let schedule = Schedule::Cron(Box::new(cron));
                // A pattern such as "0 0 30 2 *" parses but has no date to run on.
                if schedule.next_start(reference_time()).is_none() {
                    return Err(ScheduleError::NeverFires);
                }
                Ok(schedule)
            }
            n => Err(ScheduleError::FieldCount(n)),
        }
    }
}

/// Names of the five cron fields, in order.
const CRON_FIELDS: [&str; 5] = ["minute", "hour", "day-of-month", "month", "day-of-week"];

/// Croner's errors do not say which field is wrong: find it by parsing each field alone.
fn explain_cron_error(fields: &[&str], error: &croner::errors::CronError) -> String {
    let culprit = (0..fields.len()).find(|&i| {
        let alone: Vec<&str> = (0..fields.len())
            .map(|j| if j == i { fields[j] } else { "*" })
            .collect();
        croner::Cron::from_str(&alone.join(" ")).is_err()
    });
    match culprit {
        Some(i) => format!(
            "the {} field {:?} is invalid ({error})",
            CRON_FIELDS[i], fields[i]
        ),
        None => error.to_string(),
    }
}

fn interval_field(what: &'static str, text: &str, min: i64) -> Result<i64, ScheduleError> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(ScheduleError::NotANumber(what, text.to_string()));
    }
    let value: i64 = text
        .parse()
        .map_err(|_| ScheduleError::OutOfRange(what, min, MAX_INTERVAL_MINUTES, i64::MAX))?;
    if value < min || value > MAX_INTERVAL_MINUTES {
        return Err(ScheduleError::OutOfRange(
            what,
            min,
            MAX_INTERVAL_MINUTES,
            value,
        ));
    }
    Ok(value)
}

/// A fixed instant from which properties of a cron pattern are checked, so that validation
/// does not depend on the clock (2000-01-01T00:00:00Z, a leap year).
fn reference_time() -> Timestamp {
    Timestamp::from_second(946_684_800).unwrap_or(Timestamp::UNIX_EPOCH)
}

impl Schedule {
    /// Planned start of the first round of a task first seen at `seen`.
    pub fn first_start(&self, seen: Timestamp) -> Option<Timestamp> {
        match self {
            Schedule::Interval {
                start_after_minutes,
                ..
            } => add_minutes(seen, *start_after_minutes),
            Schedule::Cron(cron) => next_tick(cron, seen),
        }
    }

    /// Planned start of the round after one planned to start at `previous_start`.
    pub fn next_start(&self, previous_start: Timestamp) -> Option<Timestamp> {
        match self {
            Schedule::Interval {
                interval_minutes, ..
            } => add_minutes(previous_start, *interval_minutes),
            Schedule::Cron(cron) => next_tick(cron, previous_start),
        }
    }

    /// Shortest time between two planned starts, in minutes: the interval, or for a cron
    /// expression the shortest gap among its next ticks. A round must fit in it.
    pub fn shortest_gap_minutes(&self) -> i64 {
        match self {
            Schedule::Interval {
                interval_minutes, ..
            } => *interval_minutes,
            Schedule::Cron(cron) => {
                let mut shortest = i64::MAX;
                let mut previous = match next_tick(cron, reference_time()) {
                    Some(t) => t,
                    None => return shortest,
                };
                for _ in 0..CRON_GAP_SAMPLE {
                    let Some(next) = next_tick(cron, previous) else {
                        break;
                    };
                    shortest = shortest.min(next.duration_since(previous).as_mins());
                    previous = next;
                }
                shortest
            }
        }
    }
}

impl fmt::Display for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Schedule::Interval {
                start_after_minutes,
                interval_minutes,
            } => {
                write!(f, "{start_after_minutes} {interval_minutes}")
            }
            Schedule::Cron(cron) => f.write_str(cron.as_str()),
        }
    }
}

fn add_minutes(t: Timestamp, minutes: i64) -> Option<Timestamp> {
    t.checked_add(SignedDuration::from_mins(minutes)).ok()
}

fn next_tick(cron: &croner::Cron, after: Timestamp) -> Option<Timestamp> {
    let zoned: Zoned = after.to_zoned(TimeZone::UTC);
    cron.find_next_occurrence(&zoned, false)
        .ok()
        .map(|z| z.timestamp())
}

/// Deadline of a round: its planned start plus `roundTimeoutMinute`.
pub fn deadline(start: Timestamp, round_timeout_minute: i64) -> Option<Timestamp> {
    add_minutes(start, round_timeout_minute)
}

/// One planned round.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PlannedRound {
    /// 1-based round number.
    pub number: i64,
    /// Planned start.
    pub start: Timestamp,
    /// Planned start plus roundTimeoutMinute.
    pub deadline: Timestamp,
}

/// The rounds of a schedule for a task first seen at `seen`, in order: `roundNumber` of them,
/// or endless for -1. Stops early only if time runs out of range.
pub fn planned_rounds<'a>(
    schedule: &'a Schedule,
    plan: &SchedulePlan,
    seen: Timestamp,
) -> impl Iterator<Item = PlannedRound> + 'a {
    let limit = if plan.round_number == ROUND_NUMBER_FOREVER {
        i64::MAX
    } else {
        plan.round_number.max(0)
    };
    let timeout = plan.round_timeout_minute;
    let mut next: Option<(i64, Timestamp)> = schedule.first_start(seen).map(|s| (1, s));
    std::iter::from_fn(move || {
        let (number, start) = next?;
        if number > limit {
            return None;
        }
        let round = PlannedRound {
            number,
            start,
            deadline: deadline(start, timeout)?,
        };
        next = schedule.next_start(start).map(|s| (number + 1, s));
        Some(round)
    })
}

/// Whether more rounds follow round `done` (rounds finished so far) of `expected` (-1: forever).
pub fn has_more_rounds(done: i64, expected: i64) -> bool {
    expected == ROUND_NUMBER_FOREVER || done < expected
}
