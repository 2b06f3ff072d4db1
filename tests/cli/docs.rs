//! The commands the docs show still exist: every `kdoctor …` line in a shell block of README.md
//! and docs/*.md names a real subcommand and only flags it accepts, and every `kubectl …` line
//! uses a real kubectl verb. (What the commands do is exercised by the other tests, `kdoctor
//! local` and hack/e2e.sh.)

use std::collections::{BTreeMap, BTreeSet};

use crate::support::{kdoctor, repo};

/// One command found in a page.
struct Shown {
    page: String,
    line: String,
    words: Vec<String>,
}

/// The shell lines of fenced `sh` / `bash` / `console` blocks, continuations joined, comments,
/// prompts and everything after a pipe, redirection or `&&` dropped.
fn shell_lines(page: &str, text: &str) -> Vec<Shown> {
    let mut out = Vec::new();
    let mut in_block = false;
    let mut pending = String::new();
    for raw in text.lines() {
        let trimmed = raw.trim_start();
        if let Some(info) = trimmed.strip_prefix("```") {
            in_block = !in_block && matches!(info.trim(), "sh" | "bash" | "console" | "shell");
            pending.clear();
            continue;
        }
        if !in_block {
            continue;
        }
        let line = trimmed.strip_prefix("$ ").unwrap_or(trimmed);
        let line = match line.find(" #") {
            Some(i) => &line[..i],
            None if line.starts_with('#') => "",
            None => line,
        };
        if let Some(start) = line.trim_end().strip_suffix('\\') {
            pending.push_str(start);
            pending.push(' ');
            continue;
        }
        pending.push_str(line);
        let whole = std::mem::take(&mut pending);
        let command = whole
            .split(['|', '>', ';', '<'])
            .next()
            .unwrap_or("")
            .split("&&")
            .next()
            .unwrap_or("")
            .trim()
            .to_string();
        let words: Vec<String> = command
            .split_whitespace()
            .map(|w| w.trim_matches(['"', '\'']).to_string())
            .collect();
        if !words.is_empty() {
            out.push(Shown {
                page: page.to_string(),
                line: whole.trim().to_string(),
                words,
            });
        }
    }
    out
}

fn pages() -> Vec<(String, String)> {
    let mut pages = vec![(
        "README.md".to_string(),
        std::fs::read_to_string(repo().join("README.md")).expect("README"),
    )];
    let mut docs: Vec<_> = std::fs::read_dir(repo().join("docs"))
        .expect("docs")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    docs.sort();
    for path in docs {
        let name = format!(
            "docs/{}",
            path.file_name().unwrap_or_default().to_string_lossy()
        );
        pages.push((name, std::fs::read_to_string(&path).expect("page")));
    }
    pages
}

/// The words of a `kdoctor` invocation after the program (`kdoctor`, `cargo run --`, a path
/// ending in `/kdoctor`), if the line is one.
fn kdoctor_args(words: &[String]) -> Option<&[String]> {
    let first = words.first()?;
    if first == "kdoctor" || first.ends_with("/kdoctor") {
        return Some(&words[1..]);
    }
    if first == "cargo" && words.get(1).is_some_and(|w| w == "run") {
        let dash = words.iter().position(|w| w == "--")?;
        // Another package's binary (kube-sim, say) is not this one.
        let package = words[..dash]
            .windows(2)
            .find(|w| w[0] == "-p" || w[0] == "--package")
            .map(|w| w[1].as_str());
        if package.is_some_and(|p| p != "kdoctor") {
            return None;
        }
        return Some(&words[dash + 1..]);
    }
    None
}

#[test]
fn every_kdoctor_command_in_the_docs_names_a_real_subcommand_and_real_flags() {
    let mut help: BTreeMap<Vec<String>, String> = BTreeMap::new();
    let mut checked = 0;
    let mut problems = Vec::new();
    for (page, text) in pages() {
        for shown in shell_lines(&page, &text) {
            let Some(args) = kdoctor_args(&shown.words) else {
                continue;
            };
            // Subcommands are the leading lower-case words.
            let path: Vec<String> = args
                .iter()
                .take_while(|w| {
                    !w.is_empty() && w.chars().all(|c| c.is_ascii_lowercase() || c == '-')
                })
                .take(2)
                .cloned()
                .collect();
            let text = help.entry(path.clone()).or_insert_with(|| {
                let mut words: Vec<&str> = path.iter().map(String::as_str).collect();
                words.push("--help");
                let out = kdoctor(&words);
                if out.status.success() {
                    String::from_utf8_lossy(&out.stdout).into_owned()
                } else {
                    // A second word that is an argument, not a subcommand: the first alone.
                    let out = kdoctor(&[words[0], "--help"]);
                    String::from_utf8_lossy(&out.stdout).into_owned()
                }
            });
            if text.is_empty() {
                problems.push(format!(
                    "{}: no such subcommand: {}",
                    shown.page, shown.line
                ));
                continue;
            }
            for word in args.iter().filter(|w| w.starts_with('-') && w.len() > 1) {
                let flag = word.split('=').next().unwrap_or(word);
                let known = if flag.starts_with("--") {
                    text.contains(&format!("{flag} "))
                        || text.contains(&format!("{flag}\n"))
                        || text.contains(&format!("{flag}="))
                        || text.contains(&format!("{flag},"))
                        || text.contains(&format!("{flag} <"))
                } else {
                    text.contains(&format!("{flag},")) || text.contains(&format!("{flag} "))
                };
                if !known {
                    problems.push(format!("{}: `{flag}` unknown: {}", shown.page, shown.line));
                }
            }
            checked += 1;
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    assert!(
        checked >= 20,
        "only {checked} kdoctor commands found in the docs"
    );
}

#[test]
fn every_kubectl_command_in_the_docs_uses_a_real_verb() {
    let verbs: BTreeSet<&str> = [
        "get",
        "apply",
        "delete",
        "describe",
        "wait",
        "kustomize",
        "explain",
        "annotate",
        "label",
        "logs",
        "create",
        "edit",
        "patch",
        "rollout",
        "scale",
        "auth",
        "api-resources",
        "api-versions",
        "config",
        "port-forward",
        "exec",
        "top",
        "version",
        "cluster-info",
        "run",
        "plugin",
        // This project's plugin (`kubectl-kdoctor`), and krew, which installs it.
        "kdoctor",
        "krew",
    ]
    .into();
    // Global flags that take a value.
    let with_value = [
        "--kubeconfig",
        "-n",
        "--namespace",
        "--context",
        "--cache-dir",
        "--server",
    ];
    let mut checked = 0;
    let mut problems = Vec::new();
    for (page, text) in pages() {
        for shown in shell_lines(&page, &text) {
            if shown.words.first().is_none_or(|w| w != "kubectl") {
                continue;
            }
            let mut rest = shown.words[1..].iter();
            let mut verb = None;
            while let Some(word) = rest.next() {
                if with_value.contains(&word.as_str()) {
                    rest.next();
                } else if !word.starts_with('-') {
                    verb = Some(word.as_str());
                    break;
                }
            }
            match verb {
                Some(v) if verbs.contains(v) => checked += 1,
                _ => problems.push(format!(
                    "{}: no kubectl verb in: {}",
                    shown.page, shown.line
                )),
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    assert!(
        checked >= 20,
        "only {checked} kubectl commands found in the docs"
    );
}

#[test]
fn shell_lines_join_continuations_and_drop_comments_and_pipes() {
    let text = "x\n```sh\n# a comment\nkdoctor store stats \\\n  --data DIR   # why\ncargo run -- crd | kubectl apply -f -\n```\nkdoctor not-in-a-block\n";
    let lines = shell_lines("p", text);
    let words: Vec<Vec<String>> = lines.into_iter().map(|s| s.words).collect();
    assert_eq!(
        words,
        vec![
            vec!["kdoctor", "store", "stats", "--data", "DIR"],
            vec!["cargo", "run", "--", "crd"],
        ]
        .into_iter()
        .map(|v| v.into_iter().map(String::from).collect::<Vec<_>>())
        .collect::<Vec<_>>()
    );
}
