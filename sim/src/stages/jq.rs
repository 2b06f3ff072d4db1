//! The jq subset kwok's stage selectors and `durationFrom` use: paths (`.a.b`, `.a["k"]`,
//! `.a[0]`), iteration (`.a[]`, `.a.[]`), pipes, `select(<path> == <literal>)` and `!=`.

use serde_json::Value;

/// A parsed jq expression.
#[derive(Debug, Clone, PartialEq)]
pub struct Expr(Vec<Step>);

#[derive(Debug, Clone, PartialEq)]
enum Seg {
    Field(String),
    Index(i64),
    Iterate,
}

#[derive(Debug, Clone, PartialEq)]
enum Step {
    Path(Vec<Seg>),
    Select {
        lhs: Vec<Seg>,
        equal: bool,
        rhs: Value,
    },
}

/// A parse error with the offending expression.
#[derive(Debug, Clone, thiserror::Error)]
#[error("unsupported jq expression {expr:?}: {why}")]
pub struct JqError {
    /// The expression.
    pub expr: String,
    /// What is wrong.
    pub why: String,
}

fn split_pipes(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut depth, mut in_str, mut start) = (0i32, false, 0);
    let bytes = s.as_bytes();
    for (i, &b) in bytes.iter().enumerate() {
        match b {
            b'"' if i == 0 || bytes[i - 1] != b'\\' => in_str = !in_str,
            b'(' | b'[' if !in_str => depth += 1,
            b')' | b']' if !in_str => depth -= 1,
            b'|' if !in_str && depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&s[start..]);
    out
}

fn parse_path(p: &str, whole: &str) -> Result<Vec<Seg>, JqError> {
    let err = |why: &str| JqError {
        expr: whole.to_string(),
        why: why.to_string(),
    };
    let p = p.trim();
    if !p.starts_with('.') {
        return Err(err("a path must start with '.'"));
    }
    let chars: Vec<char> = p.chars().collect();
    let mut segs = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        match chars[i] {
            '.' => {
                i += 1;
                let start = i;
                while i < chars.len()
                    && (chars[i].is_alphanumeric() || chars[i] == '_' || chars[i] == '-')
                {
                    i += 1;
                }
                if i > start {
                    segs.push(Seg::Field(chars[start..i].iter().collect()));
                }
            }
            '[' => {
                let close = chars[i..]
                    .iter()
                    .position(|c| *c == ']')
                    .ok_or_else(|| err("unclosed '['"))?
                    + i;
                let inner: String = chars[i + 1..close].iter().collect();
                let inner = inner.trim();
                if inner.is_empty() {
                    segs.push(Seg::Iterate);
                } else if let Some(s) = inner.strip_prefix('"').and_then(|x| x.strip_suffix('"')) {
                    segs.push(Seg::Field(s.to_string()));
                } else {
                    segs.push(Seg::Index(inner.parse().map_err(|_| err("bad index"))?));
                }
                i = close + 1;
            }
            c if c.is_whitespace() => i += 1,
            _ => return Err(err("unexpected character in path")),
        }
    }
    Ok(segs)
}

fn parse_literal(s: &str, whole: &str) -> Result<Value, JqError> {
    serde_json::from_str(s.trim()).map_err(|_| JqError {
        expr: whole.to_string(),
        why: format!("bad literal {s:?}"),
    })
}

impl Expr {
    /// Parses an expression.
    pub fn parse(s: &str) -> Result<Self, JqError> {
        let mut steps = Vec::new();
        for part in split_pipes(s) {
            let part = part.trim();
            if let Some(inner) = part
                .strip_prefix("select(")
                .and_then(|x| x.strip_suffix(')'))
            {
                let (lhs, equal, rhs) = if let Some((l, r)) = inner.split_once("!=") {
                    (l, false, r)
                } else if let Some((l, r)) = inner.split_once("==") {
                    (l, true, r)
                } else {
                    return Err(JqError {
                        expr: s.to_string(),
                        why: "select() needs == or !=".into(),
                    });
                };
                steps.push(Step::Select {
                    lhs: parse_path(lhs, s)?,
                    equal,
                    rhs: parse_literal(rhs, s)?,
                });
            } else {
                steps.push(Step::Path(parse_path(part, s)?));
            }
        }
        Ok(Expr(steps))
    }

    /// The values the expression produces for `input` (jq's output stream).
    pub fn eval(&self, input: &Value) -> Vec<Value> {
        let mut cur = vec![input.clone()];
        for step in &self.0 {
            let mut next = Vec::new();
            for v in cur {
                match step {
                    Step::Path(segs) => next.extend(walk(&v, segs)),
                    Step::Select { lhs, equal, rhs } => {
                        let got = walk(&v, lhs);
                        let hit = got.iter().any(|g| g == rhs);
                        if hit == *equal {
                            next.push(v);
                        }
                    }
                }
            }
            cur = next;
        }
        cur
    }
}

fn walk(v: &Value, segs: &[Seg]) -> Vec<Value> {
    let Some((first, rest)) = segs.split_first() else {
        return vec![v.clone()];
    };
    match first {
        Seg::Field(f) => walk(v.get(f).unwrap_or(&Value::Null), rest),
        Seg::Index(i) => {
            let item = v.as_array().and_then(|a| {
                let idx = if *i < 0 { a.len() as i64 + i } else { *i };
                usize::try_from(idx).ok().and_then(|ix| a.get(ix))
            });
            walk(item.unwrap_or(&Value::Null), rest)
        }
        Seg::Iterate => match v {
            Value::Array(a) => a.iter().flat_map(|x| walk(x, rest)).collect(),
            Value::Object(m) => m.values().flat_map(|x| walk(x, rest)).collect(),
            _ => Vec::new(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn kwok_selector_expressions() {
        let node = json!({"metadata": {"annotations": {"a.b/c": "x"}},
            "status": {"conditions": [{"type": "Ready", "status": "True"}, {"type": "X", "status": "False"}]}});
        let e = Expr::parse(r#".status.conditions.[] | select(.type == "Ready") | .status"#)
            .expect("parse");
        assert_eq!(e.eval(&node), vec![json!("True")]);
        let e = Expr::parse(r#".status.conditions[] | select( .type != "Ready" ) | .type"#)
            .expect("parse");
        assert_eq!(e.eval(&node), vec![json!("X")]);
        let e = Expr::parse(r#".metadata.annotations["a.b/c"]"#).expect("parse");
        assert_eq!(e.eval(&node), vec![json!("x")]);
        assert_eq!(
            Expr::parse(".metadata.deletionTimestamp")
                .expect("p")
                .eval(&node),
            vec![Value::Null]
        );
        assert_eq!(
            Expr::parse(".status.conditions[1].type")
                .expect("p")
                .eval(&node),
            vec![json!("X")]
        );
        assert!(Expr::parse("status").is_err());
    }
}
