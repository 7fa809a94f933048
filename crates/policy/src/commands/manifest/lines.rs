//! Where things are in a YAML file: the line each document starts on and
//! the line of every mapping key and list item, so that findings can point
//! a pull-request annotation at the offending field. Read from the parser's
//! events (granit-parser, the parser serde-saphyr uses), not by scanning
//! text, so flow style, comments and multi-line scalars cannot confuse it.

use std::collections::HashMap;

use granit_parser::{Event, Parser, ScalarStyle};

/// Lines of one document. Paths are lists of keys from the document's root;
/// list items are their index as a string.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DocLines {
    /// The line (1-based) the document's content starts on.
    pub start: usize,
    lines: HashMap<Vec<String>, usize>,
}

impl DocLines {
    /// The line of `path`, or of its longest prefix present in the file, or
    /// the document's start.
    pub fn line_of(&self, path: &[String]) -> usize {
        (0..=path.len())
            .rev()
            .find_map(|n| self.lines.get(&path[..n]).copied())
            .unwrap_or(self.start)
    }

    /// The lines of the subtree at `prefix` (e.g. one item of a `List`),
    /// re-rooted there.
    pub fn subtree(&self, prefix: &[String]) -> DocLines {
        let start = self.line_of(prefix);
        DocLines {
            start,
            lines: self
                .lines
                .iter()
                .filter(|(k, _)| k.len() > prefix.len() && k.starts_with(prefix))
                .map(|(k, v)| (k[prefix.len()..].to_vec(), *v))
                .collect(),
        }
    }
}

enum Frame {
    Map {
        path: Vec<String>,
        key: Option<String>,
    },
    Seq {
        path: Vec<String>,
        next: usize,
    },
}

/// Indexes every document of a multi-document YAML text, in order. Like
/// serde-saphyr, it leaves out documents that are empty or `null`.
pub fn index(text: &str) -> Result<Vec<DocLines>, String> {
    let mut docs = Vec::new();
    let mut current: Option<DocLines> = None;
    // Whether the current document has a root that is not null.
    let mut has_root = false;
    let mut stack: Vec<Frame> = Vec::new();
    for next in Parser::new_from_str(text) {
        let (event, span) = next.map_err(|e| e.to_string())?;
        let line = span.start.line();
        match event {
            Event::DocumentStart(..) => {
                stack.clear();
                has_root = false;
                current = Some(DocLines {
                    start: line,
                    lines: HashMap::new(),
                });
            }
            Event::DocumentEnd => {
                if let Some(d) = current.take().filter(|_| has_root) {
                    docs.push(d);
                }
            }
            Event::MappingStart(..)
            | Event::SequenceStart(..)
            | Event::Scalar(..)
            | Event::Alias(_) => {
                let Some(doc) = current.as_mut() else {
                    continue;
                };
                // Where this node sits: a key, a value, an item or the root.
                let at: Option<Vec<String>> = match stack.last_mut() {
                    None => {
                        doc.start = line;
                        has_root = match &event {
                            Event::Scalar(v, style, ..) => {
                                !(*style == ScalarStyle::Plain
                                    && matches!(v.as_ref(), "" | "~" | "null" | "Null" | "NULL"))
                            }
                            _ => true,
                        };
                        Some(Vec::new())
                    }
                    Some(Frame::Map { path, key }) => match key.take() {
                        None => {
                            // A key. Complex keys (a mapping as a key) have
                            // no field path; they stay unindexed.
                            if let Event::Scalar(k, ..) = &event {
                                let mut p = path.clone();
                                p.push(k.to_string());
                                doc.lines.insert(p, line);
                                *key = Some(k.to_string());
                            } else {
                                *key = Some(String::new());
                            }
                            None
                        }
                        Some(k) => {
                            let mut p = path.clone();
                            p.push(k);
                            Some(p)
                        }
                    },
                    Some(Frame::Seq { path, next }) => {
                        let mut p = path.clone();
                        p.push(next.to_string());
                        *next += 1;
                        doc.lines.insert(p.clone(), line);
                        Some(p)
                    }
                };
                match (event, at) {
                    (Event::MappingStart(..), Some(path)) => {
                        stack.push(Frame::Map { path, key: None })
                    }
                    (Event::SequenceStart(..), Some(path)) => {
                        stack.push(Frame::Seq { path, next: 0 })
                    }
                    (Event::MappingStart(..), None) | (Event::SequenceStart(..), None) => {
                        // A complex key's own structure: skip it as a
                        // throwaway frame.
                        stack.push(Frame::Seq {
                            path: vec!["?".into()],
                            next: 0,
                        })
                    }
                    _ => {}
                }
            }
            Event::MappingEnd | Event::SequenceEnd => {
                stack.pop();
            }
            _ => {}
        }
    }
    Ok(docs)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Vec<String> {
        s.split('/').map(str::to_string).collect()
    }

    #[test]
    fn lines_of_keys_items_and_documents() {
        let text = "\
# leading comment
apiVersion: v1
kind: A
metadata:
  name: a
  annotations:
    crossplane.io/external-name: x   # why
---
---
apiVersion: s3.aws.upbound.io/v1beta1
kind: Bucket
spec:
  forProvider:
    region: |
      multi
      line
    subnets:
      - id: a
        zone: z1
      - {id: b, zone: z2}
    tags: {team: x}
";
        let docs = index(text).unwrap();
        assert_eq!(docs.len(), 2);
        assert_eq!(docs[0].start, 2);
        assert_eq!(docs[0].line_of(&p("metadata/name")), 5);
        assert_eq!(docs[0].line_of(&[]), 2);
        let ann = vec![
            "metadata".to_string(),
            "annotations".to_string(),
            "crossplane.io/external-name".to_string(),
        ];
        assert_eq!(docs[0].line_of(&ann), 7);
        // The empty document between them is left out, as serde-saphyr does.
        assert_eq!(docs[1].start, 10);
        assert_eq!(docs[1].line_of(&p("spec/forProvider/region")), 14);
        assert_eq!(docs[1].line_of(&p("spec/forProvider/subnets/0/zone")), 19);
        assert_eq!(docs[1].line_of(&p("spec/forProvider/subnets/1")), 20);
        assert_eq!(docs[1].line_of(&p("spec/forProvider/subnets/1/zone")), 20);
        assert_eq!(docs[1].line_of(&p("spec/forProvider/tags/team")), 21);
        // Absent fields fall back to the nearest parent, then the document.
        assert_eq!(docs[1].line_of(&p("spec/forProvider/nope/deeper")), 13);
        assert_eq!(docs[1].line_of(&p("status")), 10);
    }

    #[test]
    fn subtrees_are_rerooted() {
        let text =
            "kind: List\nitems:\n- kind: A\n  spec:\n    x: 1\n- kind: B\n  spec:\n    y: 2\n";
        let docs = index(text).unwrap();
        let second = docs[0].subtree(&p("items/1"));
        assert_eq!(second.start, 6);
        assert_eq!(second.line_of(&p("spec/y")), 8);
        assert_eq!(second.line_of(&p("spec/x")), 7);
    }

    #[test]
    fn counts_match_serde_saphyr() {
        for text in [
            "a: 1\n",
            "---\na: 1\n---\n",
            "---\n# only a comment\n---\nb: 2\n",
            "a: 1\n...\n---\nb: 2\n",
            "",
            "---\n---\na: 1\n",
            "a: 1\n---\n---\nb: 1\n",
            "---\nnull\n---\na: 1\n",
            "a: 1\n---\n# c\n",
            "---\n~\n---\n'null'\n",
        ] {
            let docs: Vec<serde_json::Value> = serde_saphyr::from_multiple(text).unwrap();
            assert_eq!(index(text).unwrap().len(), docs.len(), "{text:?}");
        }
        assert!(index("a: [").is_err());
    }
}
