//! Requests a typed client cannot show: the `Warning` headers the API
//! server relays from admission webhooks, and requests made as another
//! user (impersonation, as a provider's ServiceAccount).

use std::path::Path;

use http_body_util::BodyExt;
use serde_json::Value;

/// An API response with what `kubectl` would print.
#[derive(Debug, Clone)]
pub struct Response {
    pub status: u16,
    /// The `Warning` headers' texts, in order.
    pub warnings: Vec<String>,
    pub body: Value,
}

impl Response {
    /// The Status message of a failed request.
    pub fn message(&self) -> &str {
        self.body["message"].as_str().unwrap_or("")
    }
}

/// Sends `method path` with a JSON body.
pub async fn request(
    client: &kube::Client,
    method: &str,
    path: &str,
    content_type: &str,
    body: Option<&Value>,
) -> Result<Response, String> {
    let bytes = body
        .map(|b| serde_json::to_vec(b).unwrap())
        .unwrap_or_default();
    let req = hyper::Request::builder()
        .method(method)
        .uri(path)
        .header("content-type", content_type)
        .header("accept", "application/json")
        .body(kube::client::Body::from(bytes))
        .map_err(|e| e.to_string())?;
    let resp = client
        .send(req)
        .await
        .map_err(|e| format!("{method} {path}: {e}"))?;
    let status = resp.status().as_u16();
    let warnings = resp
        .headers()
        .get_all("warning")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .map(warning_text)
        .collect();
    let bytes = resp
        .into_body()
        .collect()
        .await
        .map_err(|e| e.to_string())?
        .to_bytes();
    let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    Ok(Response {
        status,
        warnings,
        body,
    })
}

/// `299 - "text"` → `text` (RFC 7234 warn-text, as the API server sends).
fn warning_text(h: &str) -> String {
    let rest = h.splitn(3, ' ').nth(2).unwrap_or(h).trim();
    let rest = rest.strip_prefix('"').unwrap_or(rest);
    let rest = rest.strip_suffix('"').unwrap_or(rest);
    rest.replace("\\\"", "\"")
}

/// POST an object (JSON) to a collection path, optionally as a dry run.
pub async fn create(
    client: &kube::Client,
    collection: &str,
    obj: &Value,
    dry_run: bool,
) -> Result<Response, String> {
    let path = if dry_run {
        format!("{collection}?dryRun=All")
    } else {
        collection.to_string()
    };
    request(client, "POST", &path, "application/json", Some(obj)).await
}

/// The admin's client, impersonating `user` (in `groups`).
pub async fn impersonating(
    admin_kubeconfig: &Path,
    user: &str,
    groups: &[&str],
) -> Result<kube::Client, String> {
    let kc = kube::config::Kubeconfig::read_from(admin_kubeconfig).map_err(|e| e.to_string())?;
    let mut config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .map_err(|e| e.to_string())?;
    config.auth_info.impersonate = Some(user.to_string());
    config.auth_info.impersonate_groups = Some(groups.iter().map(|g| g.to_string()).collect());
    kube::Client::try_from(config).map_err(|e| e.to_string())
}
