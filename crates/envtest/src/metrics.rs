//! `/metrics` of a replica, scraped over plain HTTP and parsed.

use std::collections::BTreeMap;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// One scrape: every sample by name and label set.
#[derive(Debug, Clone, Default)]
pub struct Metrics {
    samples: Vec<(String, BTreeMap<String, String>, f64)>,
    pub text: String,
}

impl Metrics {
    pub async fn scrape(port: u16) -> Result<Self, String> {
        let fetch = async {
            let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
            s.write_all(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
                .await?;
            let mut buf = Vec::new();
            s.read_to_end(&mut buf).await?;
            Ok::<_, std::io::Error>(buf)
        };
        let buf = tokio::time::timeout(Duration::from_secs(5), fetch)
            .await
            .map_err(|_| format!("scraping 127.0.0.1:{port} timed out"))?
            .map_err(|e| format!("scraping 127.0.0.1:{port}: {e}"))?;
        let text = String::from_utf8_lossy(&buf).into_owned();
        let (head, body) = text
            .split_once("\r\n\r\n")
            .ok_or_else(|| "not an HTTP response".to_string())?;
        if !head.starts_with("HTTP/1.1 200") {
            return Err(format!(
                "GET /metrics: {}",
                head.lines().next().unwrap_or("")
            ));
        }
        Ok(Self::parse(body))
    }

    pub fn parse(body: &str) -> Self {
        let mut samples = Vec::new();
        for line in body.lines() {
            if line.starts_with('#') || line.trim().is_empty() {
                continue;
            }
            let (series, value) = match line.rsplit_once(' ') {
                Some(x) => x,
                None => continue,
            };
            let Ok(value) = value.parse::<f64>() else {
                continue;
            };
            let (name, labels) = match series.split_once('{') {
                Some((n, rest)) => (n.to_string(), parse_labels(rest.trim_end_matches('}'))),
                None => (series.to_string(), BTreeMap::new()),
            };
            samples.push((name, labels, value));
        }
        Self {
            samples,
            text: body.to_string(),
        }
    }

    /// The sum of every sample of `name` whose labels include `labels`
    /// (0 when none).
    pub fn get(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.samples
            .iter()
            .filter(|(n, l, _)| {
                n == name
                    && labels
                        .iter()
                        .all(|(k, v)| l.get(*k).map(String::as_str) == Some(*v))
            })
            .map(|(_, _, v)| v)
            .sum()
    }

    /// Whether any sample of `name` with `labels` exists.
    pub fn has(&self, name: &str, labels: &[(&str, &str)]) -> bool {
        self.samples.iter().any(|(n, l, _)| {
            n == name
                && labels
                    .iter()
                    .all(|(k, v)| l.get(*k).map(String::as_str) == Some(*v))
        })
    }
}

fn parse_labels(s: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut rest = s;
    while let Some((k, after)) = rest.split_once("=\"") {
        // Values escape quotes as \" ; find the closing unescaped quote.
        let mut end = None;
        let mut escaped = false;
        for (i, c) in after.char_indices() {
            match c {
                '\\' if !escaped => escaped = true,
                '"' if !escaped => {
                    end = Some(i);
                    break;
                }
                _ => escaped = false,
            }
        }
        let Some(end) = end else { break };
        out.insert(
            k.trim_start_matches(',').trim().to_string(),
            after[..end].replace("\\\"", "\"").replace("\\\\", "\\"),
        );
        rest = &after[end + 1..];
    }
    out
}
