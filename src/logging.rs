//! Structured logs (tracing) to standard error: JSON for servers, text for tools.

use tracing_subscriber::EnvFilter;

/// Installs the global subscriber. `RUST_LOG` overrides `default_level`.
pub fn init(default_level: &str, json: bool) {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_level));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    // A second init (tests) is not an error worth reporting.
    let _ = if json {
        builder.json().try_init()
    } else {
        builder.try_init()
    };
}
