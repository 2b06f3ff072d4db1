//! The Go text/template subset kwok's `statusTemplate`s use: `{{ .a.b }}`, `{{ $x := ... }}`,
//! `{{ range }}`, `{{ if }}`/`{{ else }}`, `{{ with }}`, pipes, trim markers `{{-`/`-}}`,
//! comments, and functions (`Now`, `Quote`, `PodIP`, `NodeIP`, `NodeIPOf`, `eq`, `ne`, `not`,
//! `and`, `or`, `len`, `index`, `printf`, `JSON`).

use serde_json::Value;

/// Template parse or execution errors.
#[derive(Debug, Clone, thiserror::Error)]
#[error("template: {0}")]
pub struct TemplateError(pub String);

/// Functions the caller provides (cluster-aware ones: addresses, time).
pub trait Funcs {
    /// Calls `name` with `args` (dot is the current object); None when unknown.
    fn call(&self, name: &str, args: &[Value], dot: &Value)
    -> Option<Result<Value, TemplateError>>;
}

#[derive(Debug, Clone)]
enum Node {
    Text(String),
    Output(String),
    Assign(String, String),
    If(String, Vec<Node>, Vec<Node>),
    With(String, Vec<Node>, Vec<Node>),
    Range {
        key: Option<String>,
        value: Option<String>,
        expr: String,
        body: Vec<Node>,
        otherwise: Vec<Node>,
    },
}

/// A parsed template.
#[derive(Debug, Clone)]
pub struct Template(Vec<Node>);

enum Tok {
    Text(String),
    Action(String),
}

fn lex(src: &str) -> Result<Vec<Tok>, TemplateError> {
    let mut toks = Vec::new();
    let mut rest = src;
    let mut trim_next = false;
    while let Some(open) = rest.find("{{") {
        let mut text = rest[..open].to_string();
        if trim_next {
            text = text.trim_start().to_string();
        }
        let after = &rest[open + 2..];
        let close = after
            .find("}}")
            .ok_or_else(|| TemplateError("unclosed action".into()))?;
        let mut body = &after[..close];
        if let Some(b) = body.strip_prefix('-') {
            text = text.trim_end().to_string();
            body = b;
        }
        trim_next = false;
        if let Some(b) = body.strip_suffix('-') {
            trim_next = true;
            body = b;
        }
        toks.push(Tok::Text(text));
        toks.push(Tok::Action(body.trim().to_string()));
        rest = &after[close + 2..];
    }
    let text = if trim_next { rest.trim_start() } else { rest };
    toks.push(Tok::Text(text.to_string()));
    Ok(toks)
}

fn parse_block(
    toks: &mut std::iter::Peekable<std::vec::IntoIter<Tok>>,
) -> Result<(Vec<Node>, String), TemplateError> {
    let mut nodes = Vec::new();
    while let Some(t) = toks.next() {
        match t {
            Tok::Text(s) => {
                if !s.is_empty() {
                    nodes.push(Node::Text(s));
                }
            }
            Tok::Action(a) => {
                if a.starts_with("/*") {
                    continue;
                }
                if a == "end" || a == "else" {
                    return Ok((nodes, a));
                }
                if let Some(cond) = a.strip_prefix("if ") {
                    let (then, term) = parse_block(toks)?;
                    let otherwise = if term == "else" {
                        parse_block(toks)?.0
                    } else {
                        Vec::new()
                    };
                    nodes.push(Node::If(cond.trim().to_string(), then, otherwise));
                } else if let Some(expr) = a.strip_prefix("with ") {
                    let (then, term) = parse_block(toks)?;
                    let otherwise = if term == "else" {
                        parse_block(toks)?.0
                    } else {
                        Vec::new()
                    };
                    nodes.push(Node::With(expr.trim().to_string(), then, otherwise));
                } else if let Some(spec) = a.strip_prefix("range ") {
                    let (key, value, expr) = match spec.split_once(":=") {
                        Some((vars, expr)) => {
                            let vars: Vec<String> =
                                vars.split(',').map(|v| v.trim().to_string()).collect();
                            match vars.as_slice() {
                                [v] => (None, Some(v.clone()), expr.trim().to_string()),
                                [k, v] => {
                                    (Some(k.clone()), Some(v.clone()), expr.trim().to_string())
                                }
                                _ => return Err(TemplateError(format!("bad range {a:?}"))),
                            }
                        }
                        None => (None, None, spec.trim().to_string()),
                    };
                    let (body, term) = parse_block(toks)?;
                    let otherwise = if term == "else" {
                        parse_block(toks)?.0
                    } else {
                        Vec::new()
                    };
                    nodes.push(Node::Range {
                        key,
                        value,
                        expr,
                        body,
                        otherwise,
                    });
                } else if a.starts_with('$') && a.contains(":=") {
                    let (var, expr) = a.split_once(":=").unwrap_or((&a, ""));
                    nodes.push(Node::Assign(
                        var.trim().to_string(),
                        expr.trim().to_string(),
                    ));
                } else {
                    nodes.push(Node::Output(a));
                }
            }
        }
    }
    Ok((nodes, String::new()))
}

impl Template {
    /// Parses a template.
    pub fn parse(src: &str) -> Result<Self, TemplateError> {
        let mut toks = lex(src)?.into_iter().peekable();
        let (nodes, term) = parse_block(&mut toks)?;
        if !term.is_empty() {
            return Err(TemplateError(format!("unexpected {{{{ {term} }}}}")));
        }
        Ok(Template(nodes))
    }

    /// Renders the template with `dot` as `.` and `$`.
    pub fn render(&self, dot: &Value, funcs: &dyn Funcs) -> Result<String, TemplateError> {
        let mut out = String::new();
        let mut ctx = Ctx {
            vars: vec![("$".into(), dot.clone())],
            funcs,
        };
        ctx.exec(&self.0, dot, &mut out)?;
        Ok(out)
    }
}

struct Ctx<'a> {
    vars: Vec<(String, Value)>,
    funcs: &'a dyn Funcs,
}

fn truthy(v: &Value) -> bool {
    match v {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64().is_some_and(|f| f != 0.0),
        Value::String(s) => !s.is_empty(),
        Value::Array(a) => !a.is_empty(),
        Value::Object(m) => !m.is_empty(),
    }
}

fn print(v: &Value) -> String {
    match v {
        Value::Null => String::new(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn field_path(base: &Value, path: &str) -> Value {
    let mut cur = base;
    for seg in path.split('.').filter(|s| !s.is_empty()) {
        match cur.get(seg) {
            Some(v) => cur = v,
            None => return Value::Null,
        }
    }
    cur.clone()
}

fn split_top(s: &str, sep: char) -> Vec<String> {
    let mut out = Vec::new();
    let (mut depth, mut in_str, mut cur) = (0, false, String::new());
    let mut prev = ' ';
    for c in s.chars() {
        if c == '"' && prev != '\\' {
            in_str = !in_str;
        }
        if !in_str {
            if c == '(' {
                depth += 1;
            } else if c == ')' {
                depth -= 1;
            }
        }
        if c == sep && !in_str && depth == 0 {
            out.push(std::mem::take(&mut cur));
        } else {
            cur.push(c);
        }
        prev = c;
    }
    out.push(cur);
    out
}

fn terms(s: &str) -> Vec<String> {
    split_top(s.trim(), ' ')
        .into_iter()
        .map(|t| t.trim().to_string())
        .filter(|t| !t.is_empty())
        .collect()
}

impl Ctx<'_> {
    fn var(&self, name: &str) -> Result<Value, TemplateError> {
        self.vars
            .iter()
            .rev()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
            .ok_or_else(|| TemplateError(format!("undefined variable {name}")))
    }

    fn term(&self, t: &str, dot: &Value) -> Result<Value, TemplateError> {
        if t == "." {
            return Ok(dot.clone());
        }
        if let Some(path) = t.strip_prefix('.') {
            return Ok(field_path(dot, path));
        }
        if let Some(rest) = t.strip_prefix('$') {
            let (name, path) = match rest.find('.') {
                Some(i) => (format!("${}", &rest[..i]), &rest[i..]),
                None => (format!("${rest}"), ""),
            };
            return Ok(field_path(&self.var(&name)?, path));
        }
        if let Some(inner) = t.strip_prefix('(').and_then(|x| x.strip_suffix(')')) {
            return self.pipeline(inner, dot);
        }
        if t.starts_with('"') {
            return serde_json::from_str(t)
                .map_err(|e| TemplateError(format!("bad string {t}: {e}")));
        }
        match t {
            "true" => return Ok(Value::Bool(true)),
            "false" => return Ok(Value::Bool(false)),
            "nil" => return Ok(Value::Null),
            _ => {}
        }
        if let Ok(n) = serde_json::from_str::<serde_json::Number>(t) {
            return Ok(Value::Number(n));
        }
        self.call(t, &[], dot)
    }

    fn call(&self, name: &str, args: &[Value], dot: &Value) -> Result<Value, TemplateError> {
        let arg = |i: usize| args.get(i).cloned().unwrap_or(Value::Null);
        Ok(match name {
            "eq" => Value::Bool(args.len() >= 2 && args[1..].iter().any(|a| *a == args[0])),
            "ne" => Value::Bool(arg(0) != arg(1)),
            "not" => Value::Bool(!truthy(&arg(0))),
            "and" => args
                .iter()
                .find(|a| !truthy(a))
                .cloned()
                .unwrap_or_else(|| args.last().cloned().unwrap_or(Value::Null)),
            "or" => args
                .iter()
                .find(|a| truthy(a))
                .cloned()
                .unwrap_or_else(|| args.last().cloned().unwrap_or(Value::Null)),
            "len" => Value::from(match arg(0) {
                Value::Array(a) => a.len(),
                Value::Object(m) => m.len(),
                Value::String(s) => s.len(),
                _ => 0,
            }),
            "index" => match (arg(0), arg(1)) {
                (Value::Array(a), Value::Number(n)) => n
                    .as_u64()
                    .and_then(|i| a.get(i as usize).cloned())
                    .unwrap_or(Value::Null),
                (Value::Object(m), Value::String(k)) => m.get(&k).cloned().unwrap_or(Value::Null),
                _ => Value::Null,
            },
            "Quote" => Value::String(
                serde_json::to_string(&Value::String(print(&arg(0)))).unwrap_or_default(),
            ),
            "JSON" => Value::String(serde_json::to_string(&arg(0)).unwrap_or_default()),
            "printf" => {
                let fmt = print(&arg(0));
                let mut out = String::new();
                let mut rest = args.iter().skip(1);
                let mut chars = fmt.chars().peekable();
                while let Some(c) = chars.next() {
                    if c == '%' {
                        match chars.next() {
                            Some('%') => out.push('%'),
                            Some(_) => out.push_str(&rest.next().map(print).unwrap_or_default()),
                            None => out.push('%'),
                        }
                    } else {
                        out.push(c);
                    }
                }
                Value::String(out)
            }
            other => match self.funcs.call(other, args, dot) {
                Some(r) => r?,
                None => return Err(TemplateError(format!("function {other:?} not defined"))),
            },
        })
    }

    fn command(
        &self,
        cmd: &str,
        dot: &Value,
        piped: Option<Value>,
    ) -> Result<Value, TemplateError> {
        let ts = terms(cmd);
        let Some(first) = ts.first() else {
            return Err(TemplateError("empty command".into()));
        };
        let is_func = first
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic())
            && !matches!(first.as_str(), "true" | "false" | "nil");
        if is_func {
            let mut args = ts[1..]
                .iter()
                .map(|t| self.term(t, dot))
                .collect::<Result<Vec<_>, _>>()?;
            if let Some(p) = piped {
                args.push(p);
            }
            return self.call(first, &args, dot);
        }
        if ts.len() > 1 || piped.is_some() {
            return Err(TemplateError(format!(
                "can't give arguments to non-function {first}"
            )));
        }
        self.term(first, dot)
    }

    fn pipeline(&self, p: &str, dot: &Value) -> Result<Value, TemplateError> {
        let mut value = None;
        for cmd in split_top(p, '|') {
            value = Some(self.command(&cmd, dot, value)?);
        }
        Ok(value.unwrap_or(Value::Null))
    }

    fn exec(&mut self, nodes: &[Node], dot: &Value, out: &mut String) -> Result<(), TemplateError> {
        let depth = self.vars.len();
        for n in nodes {
            match n {
                Node::Text(t) => out.push_str(t),
                Node::Output(p) => out.push_str(&print(&self.pipeline(p, dot)?)),
                Node::Assign(var, p) => {
                    let v = self.pipeline(p, dot)?;
                    self.vars.push((var.clone(), v));
                }
                Node::If(cond, then, otherwise) => {
                    if truthy(&self.pipeline(cond, dot)?) {
                        self.exec(then, dot, out)?;
                    } else {
                        self.exec(otherwise, dot, out)?;
                    }
                }
                Node::With(expr, then, otherwise) => {
                    let v = self.pipeline(expr, dot)?;
                    if truthy(&v) {
                        self.exec(then, &v, out)?;
                    } else {
                        self.exec(otherwise, dot, out)?;
                    }
                }
                Node::Range {
                    key,
                    value,
                    expr,
                    body,
                    otherwise,
                } => {
                    let v = self.pipeline(expr, dot)?;
                    let items: Vec<(Value, Value)> = match v {
                        Value::Array(a) => a
                            .into_iter()
                            .enumerate()
                            .map(|(i, x)| (Value::from(i), x))
                            .collect(),
                        Value::Object(m) => {
                            m.into_iter().map(|(k, x)| (Value::String(k), x)).collect()
                        }
                        _ => Vec::new(),
                    };
                    if items.is_empty() {
                        self.exec(otherwise, dot, out)?;
                    }
                    for (k, item) in items {
                        let mark = self.vars.len();
                        if let Some(kv) = key {
                            self.vars.push((kv.clone(), k));
                        }
                        if let Some(vv) = value {
                            self.vars.push((vv.clone(), item.clone()));
                        }
                        self.exec(body, &item, out)?;
                        self.vars.truncate(mark);
                    }
                }
            }
        }
        self.vars.truncate(depth);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    struct NoFuncs;
    impl Funcs for NoFuncs {
        fn call(&self, name: &str, _: &[Value], _: &Value) -> Option<Result<Value, TemplateError>> {
            (name == "Now").then(|| Ok(json!("T")))
        }
    }

    #[test]
    fn renders_kwok_style_templates() {
        let t = Template::parse(
            "{{ $now := Now }}\nphase: Running\n{{- with .status }}\nold: {{ .phase }}{{ end }}\ncontainerStatuses:\n{{- range $i, $c := .spec.containers }}\n- name: {{ $c.name | Quote }}\n  index: {{ $i }}\n  at: {{ $now }}\n{{- end }}\n{{ if eq .spec.x \"a\" \"b\" }}x: yes{{ else }}x: no{{ end }}",
        )
        .expect("parse");
        let out = t
            .render(
                &json!({"spec": {"x": "b", "containers": [{"name": "a"}, {"name": "b"}]}, "status": {"phase": "Pending"}}),
                &NoFuncs,
            )
            .expect("render");
        assert_eq!(
            out,
            "\nphase: Running\nold: Pending\ncontainerStatuses:\n- name: \"a\"\n  index: 0\n  at: T\n- name: \"b\"\n  index: 1\n  at: T\nx: yes"
        );
        assert!(
            Template::parse("{{ if .x }}")
                .expect("parse")
                .render(&json!({}), &NoFuncs)
                .is_ok()
        );
        assert!(
            Template::parse("{{ Unknown }}")
                .expect("parse")
                .render(&json!({}), &NoFuncs)
                .is_err()
        );
    }
}
