//! Who may call the API as which tenant: bearer tokens granted to tenants, checked before a
//! request's body is read or an in-flight slot is taken (issue 18).
//!
//! Tokens come from a file (`QUEEN_API_TOKENS_FILE` or `--tokens-file`: one `<tenant> <token>` a
//! line, blank lines and `#` comments skipped) and from the environment
//! (`QUEEN_API_TOKENS=<tenant>:<token>,<tenant>:<token>`), both if both are given. A tenant may
//! hold several tokens (to rotate one without a gap); a token is granted once. The tenant `*` is
//! the operator: its token may act as any tenant (the `x-queen-tenant` header says which,
//! `default` without it) and is the only one that may read or set the kill switches. Anything
//! wrong in them (a token empty, under [`MIN_TOKEN_BYTES`], outside the bearer token syntax, or
//! given twice; a tenant name the API would refuse; an unreadable file) stops the start, naming
//! the file and line or the entry, never the token.
//!
//! With tokens, every `/api/v1` request needs `Authorization: Bearer <token>`:
//!
//! | request | answer |
//! |---|---|
//! | no `Authorization`, another scheme, or an empty token | 401 `missing_token` |
//! | a token no one was granted (or the header twice) | 401 `invalid_token` |
//! | a tenant's token with another tenant's `x-queen-tenant` | 403 `forbidden_tenant` |
//! | a tenant's token on `/api/v1/system/switches` | 403 `operator_only` |
//! | a tenant's token without `x-queen-tenant` | acts as its tenant |
//!
//! A 401 carries `WWW-Authenticate: Bearer realm="queen"` (RFC 6750). `/metrics` and `/healthz`
//! stay open unless `QUEEN_API_AUTH_MONITORING=1`, which makes them want any valid token.
//!
//! Only SHA-256 digests of the tokens are kept. A presented token is hashed once and its digest
//! compared with every granted digest, all of them, in constant time (`subtle`): how long the
//! look-up takes depends on how many tokens there are, not on how much of a token is right nor on
//! whose it is.
//!
//! Without tokens the API is open to whoever reaches it, as before issue 18: allowed on a loopback
//! address, refused on any other ([`listen_rule`]) unless `QUEEN_API_ALLOW_NO_AUTH=1` or
//! `--insecure-no-auth` says so.
//!
//! This file is what a request meets; [`setup`] reads and checks the tokens and the settings at
//! start, and owns the listen rule.

mod setup;

pub use setup::{
    AuthSettings, Listening, MAX_TOKEN_BYTES, MAX_TOKENS, MIN_TOKEN_BYTES, listen_rule,
};

use axum::extract::{MatchedPath, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};
use subtle::{Choice, ConditionallySelectable, ConstantTimeEq};

use super::ApiState;
use super::errors::ApiError;
use super::input::TENANT_HEADER;

/// The tenant name that grants the operator's rights.
pub const OPERATOR: &str = "*";

/// The routes only the operator's token may call (templates of [`super::ROUTES`]).
pub const OPERATOR_ROUTES: &[&str] = &["/api/v1/system/switches"];

/// The challenge of a 401 without a usable token.
const CHALLENGE: &str = "Bearer realm=\"queen\"";

/// The challenge of a 401 with a token no one holds.
const CHALLENGE_INVALID: &str = "Bearer realm=\"queen\", error=\"invalid_token\"";

/// What a token grants.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Grant {
    /// Acting as this tenant only. `header` is its name as an `x-queen-tenant` value, filled in
    /// when a request does not name its tenant.
    Tenant { name: String, header: HeaderValue },
    /// Acting as any tenant, and the kill switches.
    Operator,
}

/// One granted token, as its digest.
struct Entry {
    digest: [u8; 32],
    grant: Grant,
}

/// Every granted token. Holds digests only; its `Debug` shows counts.
pub struct Tokens {
    entries: Vec<Entry>,
}

impl std::fmt::Debug for Tokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.describe())
    }
}

fn digest_of(token: &[u8]) -> [u8; 32] {
    Sha256::digest(token).into()
}

impl Tokens {
    /// The grant of `presented`, looked up in constant time: every digest is compared, the
    /// comparison of each does not stop at its first differing byte, and the match is picked
    /// without a branch.
    pub fn grant_of(&self, presented: &[u8]) -> Option<&Grant> {
        let at = self.position(&digest_of(presented), |kept, given| {
            kept[..].ct_eq(&given[..])
        })?;
        Some(&self.entries[at].grant)
    }

    /// Where `digest` is among the entries, comparing it with every one of them by `same`, a
    /// match or not, and remembering the match without a branch.
    fn position(
        &self,
        digest: &[u8; 32],
        mut same: impl FnMut(&[u8; 32], &[u8; 32]) -> Choice,
    ) -> Option<usize> {
        let mut found = Choice::from(0);
        let mut at = 0u64;
        for (index, entry) in self.entries.iter().enumerate() {
            let matched = same(&entry.digest, digest);
            at.conditional_assign(&(index as u64), matched);
            found |= matched;
        }
        bool::from(found).then_some(at as usize)
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// For start-up logs: how many tokens for how many tenants, never a token.
    pub fn describe(&self) -> String {
        let mut tenants: Vec<&str> = self
            .entries
            .iter()
            .filter_map(|entry| match &entry.grant {
                Grant::Tenant { name, .. } => Some(name.as_str()),
                Grant::Operator => None,
            })
            .collect();
        tenants.sort_unstable();
        tenants.dedup();
        let operator = self
            .entries
            .iter()
            .filter(|entry| entry.grant == Grant::Operator)
            .count();
        format!(
            "{} tokens: {} tenants, {operator} operator tokens",
            self.entries.len(),
            tenants.len()
        )
    }
}

/// How a request's caller was let in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Access<'a> {
    /// Any tenant, and the switches.
    Operator,
    /// Its own tenant; `fill` is the `x-queen-tenant` to add when the request names none.
    Tenant { fill: Option<&'a HeaderValue> },
}

/// What a request is for, as far as tokens go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purpose {
    /// A tenant's data: `/api/v1` other than the switches.
    TenantData,
    /// [`OPERATOR_ROUTES`].
    Operator,
    /// `/metrics`, `/healthz` when closed: any valid token.
    Monitoring,
}

/// A request turned away: 401 (with its challenge) or 403.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub error: ApiError,
    pub challenge: Option<&'static str>,
}

impl Refusal {
    fn unauthenticated(code: &'static str, message: impl Into<String>) -> Refusal {
        let challenge = if code == "invalid_token" {
            CHALLENGE_INVALID
        } else {
            CHALLENGE
        };
        Refusal {
            error: ApiError::new(StatusCode::UNAUTHORIZED, code, message),
            challenge: Some(challenge),
        }
    }

    fn forbidden(code: &'static str, message: impl Into<String>) -> Refusal {
        Refusal {
            error: ApiError::new(StatusCode::FORBIDDEN, code, message),
            challenge: None,
        }
    }

    /// The `queen_api_refused_total` reason.
    pub fn reason(&self) -> &'static str {
        if self.error.status == StatusCode::UNAUTHORIZED {
            "unauthenticated"
        } else {
            "forbidden"
        }
    }
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        let mut response = self.error.into_response();
        if let Some(challenge) = self.challenge {
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static(challenge),
            );
        }
        response
    }
}

/// The token of `Authorization: Bearer <token>` (the scheme in any letter case, RFC 7235).
fn presented_token(headers: &HeaderMap) -> Result<&[u8], Refusal> {
    let mut values = headers.get_all(header::AUTHORIZATION).iter();
    let Some(value) = values.next() else {
        return Err(Refusal::unauthenticated(
            "missing_token",
            "this API needs \"Authorization: Bearer <token>\"",
        ));
    };
    if values.next().is_some() {
        return Err(Refusal::unauthenticated(
            "invalid_token",
            "the Authorization header is given more than once",
        ));
    }
    let bytes = value.as_bytes();
    let (scheme, rest) = bytes
        .iter()
        .position(|byte| *byte == b' ')
        .map_or((bytes, &b""[..]), |space| bytes.split_at(space));
    let token = rest.trim_ascii();
    if !scheme.eq_ignore_ascii_case(b"bearer") || token.is_empty() {
        return Err(Refusal::unauthenticated(
            "missing_token",
            "the Authorization header must be \"Bearer <token>\"",
        ));
    }
    Ok(token)
}

/// Lets a request in or turns it away. Pure: the headers and what the request is for in, the
/// decision out.
pub fn decide<'t>(
    tokens: &'t Tokens,
    headers: &HeaderMap,
    purpose: Purpose,
) -> Result<Access<'t>, Refusal> {
    let presented = presented_token(headers)?;
    let Some(grant) = tokens.grant_of(presented) else {
        return Err(Refusal::unauthenticated(
            "invalid_token",
            "the bearer token is not one this broker was given",
        ));
    };
    let Grant::Tenant { name, header } = grant else {
        return Ok(Access::Operator);
    };
    match purpose {
        Purpose::Monitoring => Ok(Access::Tenant { fill: None }),
        Purpose::Operator => Err(Refusal::forbidden(
            "operator_only",
            format!(
                "this route needs the operator's token (tenant \"{OPERATOR}\"); this one is tenant \"{name}\"'s"
            ),
        )),
        Purpose::TenantData => {
            let mut named = headers.get_all(TENANT_HEADER).iter().peekable();
            if named.peek().is_none() {
                return Ok(Access::Tenant { fill: Some(header) });
            }
            if named.all(|value| value == header) {
                return Ok(Access::Tenant { fill: None });
            }
            Err(Refusal::forbidden(
                "forbidden_tenant",
                format!(
                    "the token is tenant \"{name}\"'s and cannot act as the tenant named in {TENANT_HEADER}"
                ),
            ))
        }
    }
}

/// The middleware in front of every `/api/v1` route, before the body is read: a caller without a
/// token holds no slot and sends no body we wait for.
pub async fn authenticate(
    State(state): State<ApiState>,
    mut request: Request,
    next: Next,
) -> Response {
    let Some(tokens) = &state.inner.auth.tokens else {
        return next.run(request).await;
    };
    let operator_route = request
        .extensions()
        .get::<MatchedPath>()
        .is_some_and(|path| OPERATOR_ROUTES.contains(&path.as_str()));
    let purpose = if operator_route {
        Purpose::Operator
    } else {
        Purpose::TenantData
    };
    match decide(tokens, request.headers(), purpose) {
        Ok(Access::Tenant { fill: Some(tenant) }) => {
            request.headers_mut().insert(TENANT_HEADER, tenant.clone());
            next.run(request).await
        }
        Ok(_) => next.run(request).await,
        Err(refusal) => {
            state.inner.metrics.refused(refusal.reason());
            refusal.into_response()
        }
    }
}

/// The middleware in front of `/metrics` and `/healthz`: any valid token when
/// `QUEEN_API_AUTH_MONITORING=1`, open otherwise.
pub async fn authenticate_monitoring(
    State(state): State<ApiState>,
    request: Request,
    next: Next,
) -> Response {
    let auth = &state.inner.auth;
    let Some(tokens) = auth.tokens.as_ref().filter(|_| auth.monitoring_closed) else {
        return next.run(request).await;
    };
    match decide(tokens, request.headers(), Purpose::Monitoring) {
        Ok(_) => next.run(request).await,
        Err(refusal) => {
            state.inner.metrics.refused(refusal.reason());
            refusal.into_response()
        }
    }
}

/// The API's authentication, ready to serve.
#[derive(Debug)]
pub struct Auth {
    /// `None`: no tokens were given, the API is open.
    pub tokens: Option<Tokens>,
    pub monitoring_closed: bool,
    pub allow_no_auth: bool,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::config::ApiConfig;

    const ACME: &str = "acme-0123456789abcdef";
    const ACME_SPARE: &str = "acme-rotated-fedcba9876543210";
    const GLOBEX: &str = "globex-0123456789abcdef";
    const OPERATOR_TOKEN: &str = "operator-0123456789abcdef";

    fn tokens() -> Tokens {
        let value = format!("acme:{ACME},acme:{ACME_SPARE},globex:{GLOBEX},*:{OPERATOR_TOKEN}");
        let settings = AuthSettings::from_vars([("QUEEN_API_TOKENS", value)], None, false)
            .expect("valid settings");
        Auth::load(&settings, &ApiConfig::default())
            .expect("valid tokens")
            .tokens
            .expect("tokens given")
    }

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for (name, value) in pairs {
            headers.append(*name, HeaderValue::from_str(value).unwrap());
        }
        headers
    }

    fn bearer(token: &str) -> String {
        format!("Bearer {token}")
    }

    #[test]
    fn the_look_up_compares_every_digest_even_after_a_match() {
        let tokens = tokens();
        let first = digest_of(ACME.as_bytes());
        for digest in [first, digest_of(b"no one's token at all")] {
            let mut compared = 0;
            tokens.position(&digest, |kept, given| {
                compared += 1;
                kept[..].ct_eq(&given[..])
            });
            assert_eq!(compared, tokens.len(), "stopped early");
        }
        assert_eq!(
            tokens.position(&first, |kept, given| kept[..].ct_eq(&given[..])),
            Some(0)
        );
    }

    #[test]
    fn the_look_up_keeps_digests_and_finds_every_token_but_no_near_miss() {
        let tokens = tokens();
        // What is kept is the SHA-256 digest, never the token.
        assert!(tokens.entries.iter().all(|e| e.digest != [0; 32]));
        assert!(
            tokens
                .entries
                .iter()
                .any(|e| e.digest == digest_of(ACME.as_bytes()))
        );
        // Each token finds its own grant wherever it stands in the list, the last one too.
        for (token, want) in [
            (ACME, Some("acme")),
            (ACME_SPARE, Some("acme")),
            (GLOBEX, Some("globex")),
            (OPERATOR_TOKEN, None),
        ] {
            match tokens.grant_of(token.as_bytes()) {
                Some(Grant::Tenant { name, .. }) => assert_eq!(Some(name.as_str()), want),
                Some(Grant::Operator) => assert_eq!(want, None),
                None => panic!("{token} not found"),
            }
        }
        // A prefix, an extension and a one-byte change are all strangers.
        let mut changed = ACME.as_bytes().to_vec();
        changed[ACME.len() - 1] ^= 1;
        for stranger in [
            &ACME.as_bytes()[..ACME.len() - 1],
            format!("{ACME}0").as_bytes(),
            &changed,
        ] {
            assert_eq!(tokens.grant_of(stranger), None);
        }
    }

    #[test]
    fn no_token_or_an_unknown_one_is_a_401_with_its_challenge() {
        let tokens = tokens();
        for (sent, code) in [
            (vec![], "missing_token"),
            (
                vec![("authorization", "Basic YWNtZTpzZWNyZXQ=")],
                "missing_token",
            ),
            (vec![("authorization", "Bearer")], "missing_token"),
            (vec![("authorization", "Bearer   ")], "missing_token"),
            (
                vec![("authorization", "Bearer not-a-granted-token-0000")],
                "invalid_token",
            ),
            (
                vec![
                    ("authorization", &*bearer(ACME)),
                    ("authorization", &*bearer(ACME)),
                ],
                "invalid_token",
            ),
        ] {
            let refusal = decide(&tokens, &headers(&sent), Purpose::TenantData).unwrap_err();
            assert_eq!(
                (refusal.error.status, refusal.error.code),
                (StatusCode::UNAUTHORIZED, code),
                "{sent:?}"
            );
            assert_eq!(refusal.reason(), "unauthenticated");
            let want = if code == "invalid_token" {
                CHALLENGE_INVALID
            } else {
                CHALLENGE
            };
            assert_eq!(refusal.challenge, Some(want));
        }
        // The scheme in any letter case, the token as sent.
        let sent = headers(&[("authorization", &format!("bEARER {ACME}"))]);
        assert!(decide(&tokens, &sent, Purpose::TenantData).is_ok());
    }

    #[test]
    fn a_tenants_token_acts_as_its_tenant_and_is_forbidden_others() {
        let tokens = tokens();
        let acme = bearer(ACME);
        let access = decide(
            &tokens,
            &headers(&[("authorization", &acme)]),
            Purpose::TenantData,
        );
        assert_eq!(
            access,
            Ok(Access::Tenant {
                fill: Some(&HeaderValue::from_static("acme"))
            })
        );
        let own = headers(&[("authorization", &acme), (TENANT_HEADER, "acme")]);
        assert_eq!(
            decide(&tokens, &own, Purpose::TenantData),
            Ok(Access::Tenant { fill: None })
        );
        for other in [
            vec![(TENANT_HEADER, "globex")],
            vec![(TENANT_HEADER, "ACME")],
            vec![(TENANT_HEADER, "acme"), (TENANT_HEADER, "globex")],
        ] {
            let mut sent = other.clone();
            sent.push(("authorization", &acme));
            let refusal = decide(&tokens, &headers(&sent), Purpose::TenantData).unwrap_err();
            assert_eq!(
                (refusal.error.status, refusal.error.code, refusal.challenge),
                (StatusCode::FORBIDDEN, "forbidden_tenant", None),
                "{other:?}"
            );
            assert_eq!(refusal.reason(), "forbidden");
        }
        // A second token of the same tenant is the same tenant.
        let spare = headers(&[
            ("authorization", &bearer(ACME_SPARE)),
            (TENANT_HEADER, "acme"),
        ]);
        assert!(decide(&tokens, &spare, Purpose::TenantData).is_ok());
    }

    #[test]
    fn only_the_operators_token_reaches_the_switches_and_it_may_act_as_anyone() {
        let tokens = tokens();
        let acme = headers(&[("authorization", &bearer(ACME))]);
        let refusal = decide(&tokens, &acme, Purpose::Operator).unwrap_err();
        assert_eq!(
            (refusal.error.status, refusal.error.code),
            (StatusCode::FORBIDDEN, "operator_only")
        );
        let operator = bearer(OPERATOR_TOKEN);
        for purpose in [Purpose::Operator, Purpose::TenantData, Purpose::Monitoring] {
            let sent = headers(&[("authorization", &operator), (TENANT_HEADER, "globex")]);
            assert_eq!(decide(&tokens, &sent, purpose), Ok(Access::Operator));
        }
        // Monitoring wants a valid token, any tenant's.
        assert!(decide(&tokens, &acme, Purpose::Monitoring).is_ok());
        assert!(decide(&tokens, &HeaderMap::new(), Purpose::Monitoring).is_err());
    }
}
