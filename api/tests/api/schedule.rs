//! Schedule maths: both forms, month and year boundaries, roundNumber -1, deadlines.

use jiff::Timestamp;
use kdoctor_api::schedule::{Schedule, ScheduleError, deadline, has_more_rounds, planned_rounds};
use kdoctor_api::task::SchedulePlan;

fn at(text: &str) -> Timestamp {
    text.parse().expect("a timestamp")
}

fn parse(text: &str) -> Schedule {
    text.parse().unwrap_or_else(|e| panic!("{text:?}: {e}"))
}

fn plan(schedule: &str, timeout: i64, rounds: i64) -> SchedulePlan {
    SchedulePlan {
        schedule: Some(schedule.to_string()),
        round_timeout_minute: timeout,
        round_number: rounds,
    }
}

#[test]
fn interval_form_starts_after_the_delay_then_every_interval() {
    let s = parse("3 10");
    let seen = at("2026-11-22T07:00:30Z");
    assert_eq!(s.first_start(seen), Some(at("2026-11-22T07:03:30Z")));
    assert_eq!(
        s.next_start(at("2026-11-22T07:03:30Z")),
        Some(at("2026-11-22T07:13:30Z"))
    );
    assert_eq!(parse("0 1").first_start(seen), Some(seen));
    assert_eq!(s.shortest_gap_minutes(), 10);
}

#[test]
fn interval_form_crosses_month_and_year_boundaries() {
    let s = parse("0 1440");
    assert_eq!(
        s.next_start(at("2026-12-31T23:30:00Z")),
        Some(at("2027-01-01T23:30:00Z"))
    );
    assert_eq!(
        s.next_start(at("2028-02-28T12:00:00Z")),
        Some(at("2028-02-29T12:00:00Z"))
    );
}

#[test]
fn fields_may_be_separated_by_any_run_of_blanks() {
    assert_eq!(parse(" 0 \t 5 ").to_string(), "0 5");
    assert_eq!(
        parse("*/15  *\t* * *").first_start(at("2026-01-01T00:01:00Z")),
        Some(at("2026-01-01T00:15:00Z"))
    );
}

#[test]
fn cron_form_fires_strictly_after_the_given_time() {
    let s = parse("0 * * * *");
    assert_eq!(
        s.first_start(at("2026-11-22T07:00:00Z")),
        Some(at("2026-11-22T08:00:00Z"))
    );
    assert_eq!(
        s.first_start(at("2026-11-22T07:59:59Z")),
        Some(at("2026-11-22T08:00:00Z"))
    );
    assert_eq!(s.shortest_gap_minutes(), 60);
}

#[test]
fn cron_form_handles_month_ends_leap_days_and_new_year() {
    // The 31st skips months that do not have one.
    assert_eq!(
        parse("0 0 31 * *").next_start(at("2026-01-31T00:00:00Z")),
        Some(at("2026-03-31T00:00:00Z"))
    );
    // February 29th waits for the next leap year.
    assert_eq!(
        parse("0 0 29 2 *").next_start(at("2025-03-01T00:00:00Z")),
        Some(at("2028-02-29T00:00:00Z"))
    );
    // New year.
    assert_eq!(
        parse("30 6 1 1 *").next_start(at("2026-12-31T23:59:00Z")),
        Some(at("2027-01-01T06:30:00Z"))
    );
    // Month names and last-of-month ranges.
    assert_eq!(
        parse("0 12 1 jan,jul *").next_start(at("2026-02-01T00:00:00Z")),
        Some(at("2026-07-01T12:00:00Z"))
    );
}

#[test]
fn cron_day_of_month_and_day_of_week_combine_as_in_vixie_cron() {
    // Both restricted: either matches. 2026-11-22 is a Sunday; the 1st of December a Tuesday.
    let s = parse("0 0 1 * 1");
    assert_eq!(
        s.next_start(at("2026-11-22T00:00:00Z")),
        Some(at("2026-11-23T00:00:00Z"))
    );
    assert_eq!(
        s.next_start(at("2026-11-30T00:00:00Z")),
        Some(at("2026-12-01T00:00:00Z"))
    );
    // Weekdays at 09:00: the shortest gap is a day.
    assert_eq!(parse("0 9 * * 1-5").shortest_gap_minutes(), 1440);
}

#[test]
fn bad_schedules_say_why() {
    assert_eq!(
        "@hourly".parse::<Schedule>().err(),
        Some(ScheduleError::FieldCount(1))
    );
    assert_eq!(
        "0 * * * * *".parse::<Schedule>().err(),
        Some(ScheduleError::FieldCount(6))
    );
    assert_eq!(
        "".parse::<Schedule>().err(),
        Some(ScheduleError::FieldCount(0))
    );
    assert!(matches!(
        "-1 5".parse::<Schedule>(),
        Err(ScheduleError::NotANumber(..))
    ));
    assert!(matches!(
        "1 99999999999999999999".parse::<Schedule>(),
        Err(ScheduleError::OutOfRange(..))
    ));
    assert!(matches!(
        "0 0 32 * *".parse::<Schedule>(),
        Err(ScheduleError::Cron(_))
    ));
    assert_eq!(
        "0 0 31 2 *".parse::<Schedule>().err(),
        Some(ScheduleError::NeverFires)
    );
}

#[test]
fn planned_rounds_follow_the_schedule_and_the_round_number() {
    let p = plan("2 5", 3, 3);
    let s = parse(p.schedule.as_deref().expect("set"));
    let rounds: Vec<_> = planned_rounds(&s, &p, at("2026-11-22T07:00:00Z")).collect();
    assert_eq!(rounds.len(), 3);
    assert_eq!(rounds[0].number, 1);
    assert_eq!(rounds[0].start, at("2026-11-22T07:02:00Z"));
    assert_eq!(rounds[0].deadline, at("2026-11-22T07:05:00Z"));
    assert_eq!(rounds[2].number, 3);
    assert_eq!(rounds[2].start, at("2026-11-22T07:12:00Z"));
}

#[test]
fn round_number_minus_one_runs_forever() {
    let p = plan("0 * * * *", 30, -1);
    let s = parse("0 * * * *");
    let rounds: Vec<_> = planned_rounds(&s, &p, at("2026-12-31T20:10:00Z"))
        .take(1000)
        .collect();
    assert_eq!(rounds.len(), 1000);
    assert_eq!(rounds[3].start, at("2027-01-01T00:00:00Z"));
    assert_eq!(rounds[999].number, 1000);
    assert!(has_more_rounds(1_000_000, -1));
    assert!(has_more_rounds(2, 3));
    assert!(!has_more_rounds(3, 3));
}

#[test]
fn the_deadline_is_the_start_plus_the_round_timeout() {
    assert_eq!(
        deadline(at("2026-11-22T23:30:00Z"), 60),
        Some(at("2026-11-23T00:30:00Z"))
    );
}
