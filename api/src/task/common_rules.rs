//! CEL rules shared by the specs of all kinds, so that the API server checks the round window
//! the same way `crate::validation` does (minus what needs the configuration).

/// `roundTimeoutMinute` when the whole `schedule` block is omitted (see `crate::defaults`).
pub const OMITTED_SCHEDULE_ROUND_TIMEOUT_MINUTE: i64 = 1;

/// perRequestTimeoutInMS must not exceed the round window.
pub const TIMEOUT_FITS_ROUND: &str = "!has(self.request) || !has(self.request.perRequestTimeoutInMS) \
    || self.request.perRequestTimeoutInMS <= (has(self.schedule) ? self.schedule.roundTimeoutMinute : 1) * 60000";
/// Message of [`TIMEOUT_FITS_ROUND`].
pub const TIMEOUT_FITS_ROUND_MESSAGE: &str =
    "must not be greater than schedule.roundTimeoutMinute in milliseconds";

/// The probing time plus one request timeout must fit in the round window.
pub const DURATION_FITS_ROUND: &str = "!has(self.request) \
    || self.request.durationInSecond * 1000 + (has(self.request.perRequestTimeoutInMS) ? self.request.perRequestTimeoutInMS : 0) \
    <= (has(self.schedule) ? self.schedule.roundTimeoutMinute : 1) * 60000";
/// Message of [`DURATION_FITS_ROUND`].
pub const DURATION_FITS_ROUND_MESSAGE: &str =
    "durationInSecond plus perRequestTimeoutInMS must fit in schedule.roundTimeoutMinute";
