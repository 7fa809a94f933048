//! Property names as CEL sees them in a CRD's `x-kubernetes-validations`:
//! a schema property that is a CEL reserved word, or holds `__`, `.`, `-`
//! or `/`, is read under an escaped name (apiserver's `cel.Escape`), e.g.
//! `self.forProvider.__namespace__` for a field named `namespace`.

/// The words the CEL lexer reserves, which Kubernetes escapes as `__{word}__`.
const RESERVED: &[&str] = &[
    "true",
    "false",
    "null",
    "in",
    "as",
    "break",
    "const",
    "continue",
    "else",
    "for",
    "function",
    "if",
    "import",
    "let",
    "loop",
    "package",
    "namespace",
    "return",
    "var",
    "void",
    "while",
];

/// The name under which CEL reads a schema property; `None` when the name
/// cannot be escaped (it starts with a digit or holds another character),
/// as such a property is not visible to CEL at all.
pub fn escape_property(name: &str) -> Option<String> {
    let b = name.as_bytes();
    if b.is_empty() || b[0].is_ascii_digit() {
        return None;
    }
    if RESERVED.contains(&name) {
        return Some(format!("__{name}__"));
    }
    let mut out = String::with_capacity(name.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'_' if b.get(i + 1) == Some(&b'_') => {
                out.push_str("__underscores__");
                i += 2;
                continue;
            }
            b'.' => out.push_str("__dot__"),
            b'-' => out.push_str("__dash__"),
            b'/' => out.push_str("__slash__"),
            c if c.is_ascii_alphanumeric() || c == b'_' => out.push(c as char),
            _ => return None,
        }
        i += 1;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::escape_property as e;

    #[test]
    fn kubernetes_escapes() {
        assert_eq!(e("namespace").as_deref(), Some("__namespace__"));
        assert_eq!(e("if").as_deref(), Some("__if__"));
        assert_eq!(e("region").as_deref(), Some("region"));
        assert_eq!(e("a__b").as_deref(), Some("a__underscores__b"));
        assert_eq!(e("a___b").as_deref(), Some("a__underscores___b"));
        assert_eq!(
            e("x.y-z/w").as_deref(),
            Some("x__dot__y__dash__z__slash__w")
        );
        assert_eq!(e("_x").as_deref(), Some("_x"));
        assert_eq!(e("Namespace").as_deref(), Some("Namespace"));
        assert_eq!(e("1a"), None);
        assert_eq!(e("a b"), None);
        assert_eq!(e("a:b"), None);
        assert_eq!(e(""), None);
    }
}
