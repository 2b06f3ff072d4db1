//! Report names people mistype: a report is `<kind>-<task>` (`netreach-mesh`), and the task's
//! own name (`mesh`) is what they remember.

/// The reports `asked` may have meant: those whose task part is `asked`, else those whose name
/// contains it; sorted.
fn meant<'a>(asked: &str, names: &'a [String]) -> Vec<&'a str> {
    let asked = asked.to_ascii_lowercase();
    let pick = |keep: &dyn Fn(&str) -> bool| -> Vec<&'a str> {
        names
            .iter()
            .map(String::as_str)
            .filter(|n| keep(n))
            .collect()
    };
    let mut found = pick(&|n| n.split_once('-').is_some_and(|(_, task)| task == asked));
    if found.is_empty() && !asked.is_empty() {
        found = pick(&|n| n.contains(asked.as_str()));
    }
    found.sort_unstable();
    found
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
