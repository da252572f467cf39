//! The start of [`super`]: the tokens read from their file and the environment and checked
//! (every problem named by its file and line or its entry, never by the token), the settings
//! around them, and whether `--listen` may be served with what was given.

use std::io::Read;
use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use axum::http::HeaderValue;

use super::{Auth, Entry, Grant, OPERATOR, Tokens, digest_of};
use crate::api::config::{ApiConfig, auth_var};
use crate::api::input::{TENANT_HEADER, name};

/// The fewest bytes a token may have. Sixteen base64 characters of a random token carry 96 bits,
/// beyond guessing at any request rate; a shorter token is a password someone typed. A length
/// cannot tell a random token from a typed one: this refuses the obvious, nothing more.
pub const MIN_TOKEN_BYTES: usize = 16;

/// The most bytes a token may have; a header holds it, and headers are bounded at 16 KiB.
pub const MAX_TOKEN_BYTES: usize = 1024;

/// The most tokens. Every request compares against all of them: 10 000 digests of 32 bytes is
/// 320 KB read per request, a few tens of microseconds. Not measured.
pub const MAX_TOKENS: usize = 10_000;

/// The largest tokens file read: [`MAX_TOKENS`] lines of a long tenant and a long token.
pub const MAX_TOKENS_FILE_BYTES: u64 = 16 * 1024 * 1024;

/// One `tenant token` pair as read, before it is checked. `origin` names where it was read
/// (`tokens.txt:3`, `QUEEN_API_TOKENS entry 2`) for messages, which never show the token.
struct Line<'a> {
    origin: String,
    tenant: &'a str,
    token: &'a str,
}

/// The pairs of a tokens file's text; `file` is its name in messages.
fn file_lines<'a>(text: &'a str, file: &str) -> (Vec<Line<'a>>, Vec<String>) {
    let mut lines = Vec::new();
    let mut problems = Vec::new();
    for (number, line) in text.lines().enumerate() {
        let origin = format!("{file}:{}", number + 1);
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let fields: Vec<&str> = line.split_ascii_whitespace().collect();
        match fields[..] {
            [tenant, token] => lines.push(Line {
                origin,
                tenant,
                token,
            }),
            [_] => problems.push(format!(
                "{origin}: a tenant without a token (expected \"<tenant> <token>\")"
            )),
            _ => problems.push(format!(
                "{origin}: {} fields where \"<tenant> <token>\" was expected",
                fields.len()
            )),
        }
    }
    (lines, problems)
}

/// The pairs of `QUEEN_API_TOKENS` (`tenant:token,tenant:token`). A token holds no `:` nor `,`
/// ([`token_syntax`]), so a pair splits at its last `:` and a tenant may hold one.
fn env_lines(value: &str) -> (Vec<Line<'_>>, Vec<String>) {
    let mut lines = Vec::new();
    let mut problems = Vec::new();
    for (number, entry) in value.split(',').enumerate() {
        let origin = format!("{} entry {}", auth_var::TOKENS, number + 1);
        match entry.trim().rsplit_once(':') {
            Some((tenant, token)) => lines.push(Line {
                origin,
                tenant,
                token,
            }),
            None if entry.trim().is_empty() => {
                problems.push(format!("{origin} is empty (a stray comma?)"));
            }
            None => problems.push(format!(
                "{origin} has no ':' (expected \"<tenant>:<token>\")"
            )),
        }
    }
    (lines, problems)
}

/// Whether `token` is an RFC 6750 bearer token: `A-Z a-z 0-9 - . _ ~ + /`, then `=` padding only.
fn token_syntax(token: &str) -> bool {
    let body = token.trim_end_matches('=');
    !body.is_empty()
        && body
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || b"-._~+/".contains(&byte))
}

/// The problem with one pair's token, if any. Says its length, never its bytes.
fn token_problem(line: &Line<'_>) -> Option<String> {
    let origin = &line.origin;
    let bytes = line.token.len();
    if bytes == 0 {
        Some(format!("{origin}: the token is empty"))
    } else if bytes < MIN_TOKEN_BYTES {
        Some(format!(
            "{origin}: the token is {bytes} bytes, under the {MIN_TOKEN_BYTES} a token needs"
        ))
    } else if bytes > MAX_TOKEN_BYTES {
        Some(format!(
            "{origin}: the token is {bytes} bytes, over {MAX_TOKEN_BYTES}"
        ))
    } else if !token_syntax(line.token) {
        Some(format!(
            "{origin}: the token holds characters outside A-Z a-z 0-9 - . _ ~ + / and trailing = (RFC 6750's bearer token)"
        ))
    } else {
        None
    }
}

/// The grant a pair's tenant stands for, or why the API would refuse that tenant.
fn grant_for(line: &Line<'_>, limits: &ApiConfig) -> Result<Grant, String> {
    if line.tenant == OPERATOR {
        return Ok(Grant::Operator);
    }
    let origin = &line.origin;
    if !line.tenant.bytes().all(|byte| byte.is_ascii_graphic()) {
        return Err(format!(
            "{origin}: the tenant {:?} is not visible ASCII, so no {TENANT_HEADER} header can name it",
            line.tenant
        ));
    }
    name("tenant", line.tenant, limits).map_err(|error| format!("{origin}: {}", error.message))?;
    let header = HeaderValue::from_str(line.tenant).expect("visible ASCII is a header value");
    Ok(Grant::Tenant {
        name: line.tenant.to_owned(),
        header,
    })
}

/// Checks every pair and keeps their digests; the error lists every problem.
fn tokens_of(lines: &[Line<'_>], limits: &ApiConfig) -> Result<Tokens, Vec<String>> {
    let mut problems = Vec::new();
    let mut entries: Vec<Entry> = Vec::with_capacity(lines.len());
    let mut origins: Vec<&str> = Vec::with_capacity(lines.len());
    for line in lines {
        if let Some(problem) = token_problem(line) {
            problems.push(problem);
            continue;
        }
        let grant = match grant_for(line, limits) {
            Ok(grant) => grant,
            Err(problem) => {
                problems.push(problem);
                continue;
            }
        };
        let digest = digest_of(line.token.as_bytes());
        // Start-up, not a request: no one times this comparison.
        if let Some(first) = entries.iter().position(|entry| entry.digest == digest) {
            problems.push(format!(
                "{}: the same token as {}; a token is granted once",
                line.origin, origins[first]
            ));
            continue;
        }
        entries.push(Entry { digest, grant });
        origins.push(&line.origin);
    }
    if entries.len() > MAX_TOKENS {
        problems.push(format!("{} tokens, over {MAX_TOKENS}", entries.len()));
    }
    if problems.is_empty() {
        Ok(Tokens { entries })
    } else {
        Err(problems)
    }
}

/// The authentication settings as given, before the file is read.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct AuthSettings {
    pub tokens_file: Option<PathBuf>,
    /// `QUEEN_API_TOKENS` as given: tokens in the clear, so never in `Debug`. [`Auth`] keeps
    /// digests only.
    tokens: Option<String>,
    pub monitoring_closed: bool,
    pub allow_no_auth: bool,
}

impl std::fmt::Debug for AuthSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuthSettings")
            .field("tokens_file", &self.tokens_file)
            .field("tokens", &self.tokens.as_ref().map(|_| "<hidden>"))
            .field("monitoring_closed", &self.monitoring_closed)
            .field("allow_no_auth", &self.allow_no_auth)
            .finish()
    }
}

/// `0` or `1`; anything else names the variable.
fn switch(var: &str, value: &str) -> Result<bool, String> {
    match value.trim() {
        "0" => Ok(false),
        "1" => Ok(true),
        _ => Err(format!("{var}={value:?} must be 0 or 1")),
    }
}

impl AuthSettings {
    /// From the environment's `(name, value)` pairs and the two command-line flags; each flag
    /// and its variable may not both be given.
    pub fn from_vars<I, K, V>(
        vars: I,
        tokens_file_flag: Option<PathBuf>,
        insecure_no_auth_flag: bool,
    ) -> Result<AuthSettings, String>
    where
        I: IntoIterator<Item = (K, V)>,
        K: Into<String>,
        V: Into<String>,
    {
        let mut settings = AuthSettings {
            tokens_file: tokens_file_flag,
            allow_no_auth: insecure_no_auth_flag,
            ..AuthSettings::default()
        };
        let mut problems = Vec::new();
        for (name, value) in vars.into_iter().map(|(k, v)| (k.into(), v.into())) {
            match name.as_str() {
                auth_var::TOKENS_FILE if settings.tokens_file.is_some() => problems.push(format!(
                    "both --tokens-file and {} are given; give the file once",
                    auth_var::TOKENS_FILE
                )),
                auth_var::TOKENS_FILE if value.trim().is_empty() => {
                    problems.push(format!("{} is empty", auth_var::TOKENS_FILE));
                }
                auth_var::TOKENS_FILE => settings.tokens_file = Some(PathBuf::from(value)),
                auth_var::TOKENS => settings.tokens = Some(value),
                auth_var::AUTH_MONITORING => match switch(&name, &value) {
                    Ok(closed) => settings.monitoring_closed = closed,
                    Err(problem) => problems.push(problem),
                },
                auth_var::ALLOW_NO_AUTH => match switch(&name, &value) {
                    Ok(allow) => settings.allow_no_auth |= allow,
                    Err(problem) => problems.push(problem),
                },
                _ => {}
            }
        }
        if problems.is_empty() {
            Ok(settings)
        } else {
            Err(problems.join("\n"))
        }
    }
}

impl Auth {
    /// Reads the tokens file and `QUEEN_API_TOKENS` and checks everything; the error lists every
    /// problem.
    pub fn load(settings: &AuthSettings, limits: &ApiConfig) -> Result<Auth, String> {
        let mut problems = Vec::new();
        let text = match &settings.tokens_file {
            Some(path) => match read_tokens_file(path) {
                Ok(text) => Some(text),
                Err(problem) => {
                    problems.push(problem);
                    None
                }
            },
            None => None,
        };
        let mut lines = Vec::new();
        if let (Some(path), Some(text)) = (&settings.tokens_file, &text) {
            let (read, wrong) = file_lines(text, &path.display().to_string());
            if read.is_empty() && wrong.is_empty() {
                problems.push(format!("{} holds no tokens", path.display()));
            }
            lines.extend(read);
            problems.extend(wrong);
        }
        if let Some(value) = &settings.tokens {
            let (read, wrong) = env_lines(value);
            lines.extend(read);
            problems.extend(wrong);
        }
        let tokens = match tokens_of(&lines, limits) {
            Ok(tokens) => (!tokens.is_empty()).then_some(tokens),
            Err(wrong) => {
                problems.extend(wrong);
                None
            }
        };
        problems.extend(contradictions(settings, tokens.is_some()));
        if !problems.is_empty() {
            return Err(problems.join("\n"));
        }
        Ok(Auth {
            tokens,
            monitoring_closed: settings.monitoring_closed,
            allow_no_auth: settings.allow_no_auth,
        })
    }
}

/// Settings that cannot all be meant at once.
fn contradictions(settings: &AuthSettings, has_tokens: bool) -> Vec<String> {
    let mut problems = Vec::new();
    let given_tokens = settings.tokens_file.is_some() || settings.tokens.is_some();
    if settings.monitoring_closed && !given_tokens {
        problems.push(format!(
            "{}=1 closes /metrics and /healthz to callers without a token, but no tokens are given ({} or {})",
            auth_var::AUTH_MONITORING,
            auth_var::TOKENS_FILE,
            auth_var::TOKENS
        ));
    }
    if settings.allow_no_auth && (has_tokens || given_tokens) {
        problems.push(format!(
            "tokens are given and so is {}=1 (or --insecure-no-auth); say one or the other",
            auth_var::ALLOW_NO_AUTH
        ));
    }
    problems
}

/// The file's text, at most [`MAX_TOKENS_FILE_BYTES`]. A file others may read is allowed, with a
/// warning: refusing it would stop a start over a mode a secret store may not let us set.
fn read_tokens_file(path: &Path) -> Result<String, String> {
    let shown = path.display();
    let file = std::fs::File::open(path)
        .map_err(|error| format!("cannot read the tokens file {shown}: {error}"))?;
    if let Ok(metadata) = file.metadata()
        && metadata.permissions().mode() & 0o077 != 0
    {
        tracing::warn!(file = %shown, "the tokens file may be read by others than its owner; chmod 600 it");
    }
    let mut text = String::new();
    file.take(MAX_TOKENS_FILE_BYTES + 1)
        .read_to_string(&mut text)
        .map_err(|error| format!("cannot read the tokens file {shown}: {error}"))?;
    if text.len() as u64 > MAX_TOKENS_FILE_BYTES {
        return Err(format!(
            "the tokens file {shown} is over {MAX_TOKENS_FILE_BYTES} bytes"
        ));
    }
    Ok(text)
}

/// How the API may listen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Listening {
    /// With tokens, anywhere.
    WithTokens,
    /// Without tokens, on a loopback address: only this host can call.
    OpenOnLoopback,
    /// Without tokens, reachable from other hosts, because the operator said so.
    OpenByChoice,
}

/// Whether the API may listen on `address`: without tokens only on a loopback address
/// (127.0.0.0/8, ::1, or ::ffff:127.x.y.z), unless `allow_no_auth`.
pub fn listen_rule(
    address: SocketAddr,
    has_tokens: bool,
    allow_no_auth: bool,
) -> Result<Listening, String> {
    if has_tokens {
        return Ok(Listening::WithTokens);
    }
    if address.ip().to_canonical().is_loopback() {
        return Ok(Listening::OpenOnLoopback);
    }
    if allow_no_auth {
        return Ok(Listening::OpenByChoice);
    }
    Err(format!(
        "--listen {address} is not a loopback address and no API tokens are given: anyone who reaches it could act as any tenant. Give tokens ({} or {}), listen on 127.0.0.1, or set {}=1 (--insecure-no-auth) to serve it open on purpose",
        auth_var::TOKENS_FILE,
        auth_var::TOKENS,
        auth_var::ALLOW_NO_AUTH
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    const ACME: &str = "acme-0123456789abcdef";
    const ACME_SPARE: &str = "acme-rotated-fedcba9876543210";
    const GLOBEX: &str = "globex-0123456789abcdef";
    const OPERATOR_TOKEN: &str = "operator-0123456789abcdef";

    fn settings(vars: &[(&str, &str)]) -> Result<AuthSettings, String> {
        AuthSettings::from_vars(vars.iter().copied(), None, false)
    }

    fn loaded(vars: &[(&str, &str)]) -> Result<Auth, String> {
        Auth::load(&settings(vars)?, &ApiConfig::default())
    }

    fn tokens() -> Tokens {
        let value = format!("acme:{ACME},acme:{ACME_SPARE},globex:{GLOBEX},*:{OPERATOR_TOKEN}");
        loaded(&[("QUEEN_API_TOKENS", &value)])
            .expect("valid tokens")
            .tokens
            .expect("tokens given")
    }

    /// A file under the system's temporary directory, removed when dropped.
    struct TempFile(PathBuf);

    impl TempFile {
        fn with(name: &str, text: &str) -> TempFile {
            let path =
                std::env::temp_dir().join(format!("queen-auth-{}-{name}", std::process::id()));
            std::fs::write(&path, text).unwrap();
            TempFile(path)
        }
    }

    impl Drop for TempFile {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }

    fn from_file(file: &TempFile) -> Result<Auth, String> {
        let settings = AuthSettings::from_vars(
            std::iter::empty::<(String, String)>(),
            Some(file.0.clone()),
            false,
        )?;
        Auth::load(&settings, &ApiConfig::default())
    }

    #[test]
    fn a_tokens_file_grants_its_lines_and_skips_comments_and_blank_lines() {
        let file = TempFile::with(
            "good",
            &format!("# who may call\n\nacme {ACME}\n  globex\t{GLOBEX}  \n* {OPERATOR_TOKEN}\n"),
        );
        let tokens = from_file(&file).unwrap().tokens.unwrap();
        assert_eq!(tokens.len(), 3);
        assert!(matches!(
            tokens.grant_of(ACME.as_bytes()),
            Some(Grant::Tenant { name, .. }) if name == "acme"
        ));
        assert!(matches!(
            tokens.grant_of(GLOBEX.as_bytes()),
            Some(Grant::Tenant { name, .. }) if name == "globex"
        ));
        assert_eq!(
            tokens.grant_of(OPERATOR_TOKEN.as_bytes()),
            Some(&Grant::Operator)
        );
        assert_eq!(tokens.grant_of(b"acme"), None);
    }

    #[test]
    fn every_problem_of_a_tokens_file_is_named_by_its_line_and_no_token_is_shown() {
        let short = "short-secret";
        let file = TempFile::with(
            "bad",
            &format!(
                "acme {ACME}\nglobex\nacme {short}\nacme {ACME} extra\nbad\u{e9} {GLOBEX}\nglobex {ACME}\n{} {OPERATOR_TOKEN}\nglobex quoted\"token-0123456789\n",
                "t".repeat(513)
            ),
        );
        let shown = file.0.display().to_string();
        let e = from_file(&file).unwrap_err();
        for (line, says) in [
            (2, "a tenant without a token"),
            (3, "the token is 12 bytes, under the 16 a token needs"),
            (4, "3 fields"),
            (5, "is not visible ASCII"),
            (6, "the same token as"),
            (7, "over QUEEN_API_MAX_KEY_BYTES=512"),
            (8, "outside A-Z a-z 0-9"),
        ] {
            assert!(e.contains(&format!("{shown}:{line}: ")), "line {line}: {e}");
            assert!(e.contains(says), "{says}: {e}");
        }
        assert!(
            e.contains(&format!("{shown}:6: the same token as {shown}:1")),
            "{e}"
        );
        assert!(!e.contains(&format!("{shown}:1: ")), "line 1 is good: {e}");
        for secret in [ACME, GLOBEX, OPERATOR_TOKEN, short, "quoted"] {
            assert!(!e.contains(secret), "a token leaked: {e}");
        }
    }

    #[test]
    fn an_unreadable_or_empty_tokens_file_stops_the_start() {
        let missing = TempFile(std::env::temp_dir().join("queen-auth-no-such-file"));
        let e = from_file(&missing).unwrap_err();
        assert!(
            e.contains("cannot read the tokens file") && e.contains("queen-auth-no-such-file"),
            "{e}"
        );
        let empty = TempFile::with("empty", "# nothing yet\n\n");
        let e = from_file(&empty).unwrap_err();
        assert!(e.contains("holds no tokens"), "{e}");
    }

    #[test]
    fn the_environment_list_is_checked_like_the_file_and_a_token_is_granted_once() {
        assert_eq!(tokens().len(), 4);
        let e = loaded(&[(
            "QUEEN_API_TOKENS",
            &format!("acme:{ACME},,globex{GLOBEX},globex:{ACME},acme:"),
        )])
        .unwrap_err();
        assert!(e.contains("QUEEN_API_TOKENS entry 2 is empty"), "{e}");
        assert!(e.contains("QUEEN_API_TOKENS entry 3 has no ':'"), "{e}");
        assert!(
            e.contains("QUEEN_API_TOKENS entry 4: the same token as QUEEN_API_TOKENS entry 1"),
            "{e}"
        );
        assert!(
            e.contains("QUEEN_API_TOKENS entry 5: the token is empty"),
            "{e}"
        );
        assert!(
            !e.contains(ACME) && !e.contains(GLOBEX),
            "a token leaked: {e}"
        );
        // The same token in the file and the environment is granted twice: refused.
        let file = TempFile::with("twice", &format!("acme {ACME}\n"));
        let settings = AuthSettings::from_vars(
            [("QUEEN_API_TOKENS", format!("globex:{ACME}"))],
            Some(file.0.clone()),
            false,
        )
        .unwrap();
        let e = Auth::load(&settings, &ApiConfig::default()).unwrap_err();
        assert!(e.contains("the same token as"), "{e}");
    }

    #[test]
    fn a_token_at_sixteen_bytes_is_taken_and_at_fifteen_refused() {
        let sixteen = "a".repeat(MIN_TOKEN_BYTES);
        let fifteen = "b".repeat(MIN_TOKEN_BYTES - 1);
        assert!(loaded(&[("QUEEN_API_TOKENS", &format!("acme:{sixteen}"))]).is_ok());
        let e = loaded(&[("QUEEN_API_TOKENS", &format!("acme:{fifteen}"))]).unwrap_err();
        assert!(e.contains("15 bytes, under the 16"), "{e}");
        // Padding only at the end: base64 with '=' is a bearer token, '=' inside is not.
        assert!(token_syntax("abc+/_-.~Z9=="));
        assert!(!token_syntax("abc=def"));
        assert!(!token_syntax("===="));
        assert!(!token_syntax("abc,def"));
    }

    #[test]
    fn the_switches_settings_are_zero_or_one_and_must_not_contradict_each_other() {
        let e = settings(&[("QUEEN_API_AUTH_MONITORING", "yes")]).unwrap_err();
        assert!(
            e.contains("QUEEN_API_AUTH_MONITORING=\"yes\" must be 0 or 1"),
            "{e}"
        );
        let e = loaded(&[("QUEEN_API_AUTH_MONITORING", "1")]).unwrap_err();
        assert!(e.contains("no tokens are given"), "{e}");
        let e = loaded(&[
            ("QUEEN_API_ALLOW_NO_AUTH", "1"),
            ("QUEEN_API_TOKENS", &format!("acme:{ACME}")),
        ])
        .unwrap_err();
        assert!(e.contains("say one or the other"), "{e}");
        let open = loaded(&[("QUEEN_API_ALLOW_NO_AUTH", "1")]).unwrap();
        assert!(open.tokens.is_none() && open.allow_no_auth);
        let e = AuthSettings::from_vars(
            [("QUEEN_API_TOKENS_FILE", "/a")],
            Some(PathBuf::from("/b")),
            false,
        )
        .unwrap_err();
        assert!(
            e.contains("both --tokens-file and QUEEN_API_TOKENS_FILE"),
            "{e}"
        );
        let none = loaded(&[]).unwrap();
        assert!(none.tokens.is_none() && !none.monitoring_closed && !none.allow_no_auth);
    }

    #[test]
    fn no_debug_output_shows_a_token() {
        let s = settings(&[("QUEEN_API_TOKENS", &format!("acme:{ACME}"))]).unwrap();
        let auth = Auth::load(&s, &ApiConfig::default()).unwrap();
        let shown = format!("{s:?} {auth:?}");
        assert!(!shown.contains(ACME), "{shown}");
        assert!(
            shown.contains("1 tokens: 1 tenants, 0 operator tokens"),
            "{shown}"
        );
    }

    #[test]
    fn without_tokens_only_a_loopback_address_is_served_unless_told_otherwise() {
        let at = |text: &str| text.parse::<SocketAddr>().unwrap();
        for loopback in [
            "127.0.0.1:8080",
            "127.9.9.9:1",
            "[::1]:8080",
            "[::ffff:127.0.0.1]:80",
        ] {
            assert_eq!(
                listen_rule(at(loopback), false, false),
                Ok(Listening::OpenOnLoopback),
                "{loopback}"
            );
        }
        for reachable in [
            "0.0.0.0:8080",
            "10.0.0.5:8080",
            "[::]:8080",
            "128.0.0.1:80",
            "[::ffff:10.0.0.1]:80",
        ] {
            let e = listen_rule(at(reachable), false, false).unwrap_err();
            assert!(e.contains("is not a loopback address"), "{e}");
            assert!(e.contains("QUEEN_API_ALLOW_NO_AUTH=1"), "{e}");
            assert_eq!(
                listen_rule(at(reachable), false, true),
                Ok(Listening::OpenByChoice)
            );
            assert_eq!(
                listen_rule(at(reachable), true, false),
                Ok(Listening::WithTokens)
            );
        }
    }
}
