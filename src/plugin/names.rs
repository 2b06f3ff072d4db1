//! Report names people mistype: a report is `<kind>-<task>` (`netreach-mesh`), and the task's
//! own name (`mesh`) is what they remember.

/// The reports `asked` may have meant: those whose task part is `asked`, else those whose name
/// contains it; sorted.
pub fn meant(asked: &str, names: &[String]) -> Vec<String> {
    let asked = asked.to_ascii_lowercase();
    let task_of = |name: &str| name.split_once('-').map(|(_, task)| task.to_string());
    let mut exact: Vec<String> = names
        .iter()
        .filter(|n| task_of(n).as_deref() == Some(asked.as_str()))
        .cloned()
        .collect();
    if exact.is_empty() && !asked.is_empty() {
        exact = names
            .iter()
            .filter(|n| n.contains(asked.as_str()))
            .cloned()
            .collect();
    }
    exact.sort();
    exact
}

/// What to tell someone who asked for a report that does not exist.
pub fn hint(asked: &str, names: &[String]) -> String {
    match meant(asked, names).as_slice() {
        [] => "kubectl get kdoctorreport lists them".to_string(),
        [one] => format!("did you mean {one}?"),
        many => format!("did you mean one of {}?", many.join(", ")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names() -> Vec<String> {
        [
            "netreach-mesh",
            "netdns-mesh",
            "apphttphealthy-web",
            "netreach-web-v6",
        ]
        .map(String::from)
        .to_vec()
    }

    #[test]
    fn a_task_name_points_at_its_reports() {
        assert_eq!(hint("web", &names()), "did you mean apphttphealthy-web?");
        assert_eq!(
            hint("mesh", &names()),
            "did you mean one of netdns-mesh, netreach-mesh?"
        );
    }

    #[test]
    fn else_a_part_of_a_name_and_else_the_listing() {
        assert_eq!(hint("v6", &names()), "did you mean netreach-web-v6?");
        assert_eq!(
            hint("nope", &names()),
            "kubectl get kdoctorreport lists them"
        );
    }
}
