//! curl against a `plinth serve` of the tests: raw HTTP with the server's CA and token.

use std::process::Command;

use serde_json::Value;

use super::Plinth;

/// curl against the server, with its CA and the admin token.
pub struct Http<'a> {
    plinth: &'a Plinth,
    /// The server's URL.
    pub base: String,
    /// The admin token.
    pub token: String,
}

/// One answer.
pub struct Reply {
    /// The HTTP status.
    pub code: u16,
    /// The body as text.
    pub body: String,
    /// The body's bytes.
    pub bytes: Vec<u8>,
    /// The response headers.
    pub headers: String,
}

impl Reply {
    /// The body as JSON.
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }
}

impl<'a> Http<'a> {
    /// For `plinth`.
    pub fn new(plinth: &'a Plinth) -> Self {
        let kubeconfig = std::fs::read_to_string(&plinth.kubeconfig).unwrap();
        let base = kubeconfig
            .lines()
            .find_map(|l| l.trim().strip_prefix("server: "))
            .unwrap()
            .to_owned();
        let token = std::fs::read_to_string(plinth.dir.path().join("admin.token"))
            .unwrap()
            .trim()
            .to_owned();
        Self {
            plinth,
            base,
            token,
        }
    }

    /// The same server with another bearer token (a user of a token file).
    pub fn with_token(&self, token: &str) -> Http<'a> {
        Http {
            plinth: self.plinth,
            base: self.base.clone(),
            token: token.to_owned(),
        }
    }

    /// A request; `auth` sends the token.
    pub fn request(
        &self,
        method: &str,
        path: &str,
        content_type: &str,
        body: Option<&[u8]>,
        auth: bool,
    ) -> Reply {
        self.request_with(method, path, content_type, body, auth, &[])
    }

    /// A request with extra headers (`Accept: …`).
    pub fn request_with(
        &self,
        method: &str,
        path: &str,
        content_type: &str,
        body: Option<&[u8]>,
        auth: bool,
        headers: &[&str],
    ) -> Reply {
        let headers_file = self.plinth.dir.path().join("headers.txt");
        let body_file = self.plinth.dir.path().join("body.bin");
        let mut command = Command::new("curl");
        command
            .args(["-s", "-o", "-", "-D"])
            .arg(&headers_file)
            .args(["-w", "\n%{http_code}", "--cacert"])
            .arg(self.plinth.dir.path().join("ca.crt"))
            .args(["-X", method, "-H", &format!("Content-Type: {content_type}")]);
        for header in headers {
            command.args(["-H", header]);
        }
        if auth {
            command.args(["-H", &format!("Authorization: Bearer {}", self.token)]);
        }
        if let Some(body) = body {
            std::fs::write(&body_file, body).unwrap();
            command
                .arg("--data-binary")
                .arg(format!("@{}", body_file.display()));
        }
        let out = command
            .arg(format!("{}{path}", self.base))
            .output()
            .unwrap();
        let split = out.stdout.iter().rposition(|b| *b == b'\n').unwrap();
        let (bytes, code) = (&out.stdout[..split], &out.stdout[split + 1..]);
        Reply {
            code: String::from_utf8_lossy(code).trim().parse().unwrap(),
            body: String::from_utf8_lossy(bytes).into_owned(),
            bytes: bytes.to_vec(),
            headers: std::fs::read_to_string(headers_file).unwrap_or_default(),
        }
    }

    /// GET.
    pub fn get(&self, path: &str) -> Reply {
        self.request("GET", path, "application/json", None, true)
    }

    /// GET with `Accept: accept`.
    pub fn get_as(&self, path: &str, accept: &str) -> Reply {
        let accept = format!("Accept: {accept}");
        self.request_with("GET", path, "application/json", None, true, &[&accept])
    }

    /// POST of JSON.
    pub fn post(&self, path: &str, body: &[u8]) -> Reply {
        self.request("POST", path, "application/json", Some(body), true)
    }
}
