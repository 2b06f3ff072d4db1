//! The authenticated user of a request.

use std::collections::BTreeMap;

/// Group every authenticated user gets.
pub const AUTHENTICATED: &str = "system:authenticated";
/// Group that bypasses authorization (as in Kubernetes).
pub const MASTERS: &str = "system:masters";

/// Who is asking.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct User {
    /// User name.
    pub name: String,
    /// UID, when the authenticator knows it.
    pub uid: Option<String>,
    /// Groups (always including `system:authenticated`).
    pub groups: Vec<String>,
    /// Extra attributes.
    pub extra: BTreeMap<String, Vec<String>>,
}

impl User {
    /// A user with these groups, plus `system:authenticated`.
    pub fn new(name: impl Into<String>, groups: impl IntoIterator<Item = String>) -> User {
        let mut user = User {
            name: name.into(),
            groups: groups.into_iter().collect(),
            ..User::default()
        };
        user.add_authenticated();
        user
    }

    /// Adds `system:authenticated` unless present.
    pub fn add_authenticated(&mut self) {
        if !self.groups.iter().any(|g| g == AUTHENTICATED) {
            self.groups.push(AUTHENTICATED.to_string());
        }
    }

    /// Whether authorization is bypassed.
    pub fn is_master(&self) -> bool {
        self.groups.iter().any(|g| g == MASTERS)
    }
}
