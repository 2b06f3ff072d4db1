//! Counts in English: "1 node", "5 nodes".

/// `n` and its noun, singular for one: "1 node", "5 nodes".
pub fn count(n: impl std::fmt::Display, noun: &str) -> String {
    let n = n.to_string();
    if n == "1" {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

#[cfg(test)]
mod tests {
    use super::count;

    #[test]
    fn counts_are_singular_for_one_only() {
        assert_eq!(count(1, "node"), "1 node");
        assert_eq!(count(0, "node"), "0 nodes");
        assert_eq!(count(1000_i64, "request"), "1000 requests");
    }
}
