//! The answers hyper writes on its own, to requests it cannot parse, in the documented shape.
//!
//! A request line or header hyper refuses (a NUL or another byte HTTP does not allow in a header,
//! a malformed request line, a target over its 64 KiB, a head over its read buffer) never reaches
//! the router: hyper answers 400, 414 or 431 itself, with an empty body, then closes the
//! connection. hyper 1.12 offers no hook for that answer, and no tower layer sees it (there is no
//! request to give one), so [`Documented`] sits between hyper and the socket and replaces that
//! one answer, recognised exactly, with the API's JSON error (`{"error": {"code", "message"}}`).
//!
//! Recognised exactly means: one write holding a whole response head and nothing else, status
//! 400, 414 or 431, headers `content-length: 0` and at most `date` and `connection: close`. Every answer the router
//! makes carries a `content-type`, so none is ever mistaken for it; any other write passes
//! through untouched.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use axum::http::StatusCode;
use hyper::rt::{Read, ReadBufCursor, Write};
use serde_json::json;

/// An HTTP/1 connection's I/O, with hyper's bare refusals written in the documented shape.
#[derive(Debug)]
pub struct Documented<IO> {
    io: IO,
    /// The documented answer being written in place of a bare one, and how much of it is out.
    replacing: Option<(Vec<u8>, usize)>,
}

impl<IO> Documented<IO> {
    pub fn new(io: IO) -> Documented<IO> {
        Documented {
            io,
            replacing: None,
        }
    }
}

/// The status of `bytes` when they are exactly a bare refusal of hyper's, else `None`.
fn bare_refusal(bytes: &[u8]) -> Option<StatusCode> {
    let text = std::str::from_utf8(bytes).ok()?;
    let head = text.strip_suffix("\r\n\r\n")?;
    let mut lines = head.split("\r\n");
    let status = lines.next()?.strip_prefix("HTTP/1.1 ")?;
    let status = StatusCode::from_bytes(status.get(..3)?.as_bytes()).ok()?;
    if ![
        StatusCode::BAD_REQUEST,
        StatusCode::URI_TOO_LONG,
        StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
    ]
    .contains(&status)
    {
        return None;
    }
    let mut empty = false;
    for line in lines {
        let (name, value) = line.split_once(": ")?;
        match name {
            "content-length" if value == "0" => empty = true,
            "date" => {}
            "connection" if value == "close" => {}
            _ => return None,
        }
    }
    empty.then_some(status)
}

/// The documented answer for a bare refusal with `status`.
fn documented(status: StatusCode) -> Vec<u8> {
    let (code, message) = match status {
        StatusCode::URI_TOO_LONG => (
            "uri_too_long",
            "the request target is over the HTTP parser's limit (64 KiB); the API's own limit is 8 KiB",
        ),
        StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE => (
            "headers_too_large",
            "the request head is over the HTTP parser's read buffer; the API's own limit is 16 KiB of headers",
        ),
        _ => (
            "malformed_request",
            "the request line or a header could not be parsed: a byte HTTP does not allow (a NUL, a control character, a space in a header name) or a malformed request line; nothing was done",
        ),
    };
    let body = json!({"error": {"code": code, "message": message}}).to_string();
    format!(
        "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

impl<IO: Read + Unpin> Read for Documented<IO> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: ReadBufCursor<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<IO: Write + Unpin> Documented<IO> {
    /// Writes the replacement of a bare refusal of `consumed` bytes; done when all of it is out,
    /// and then reports the bare one's bytes as written.
    fn poll_replace(
        &mut self,
        cx: &mut Context<'_>,
        status: StatusCode,
        consumed: usize,
    ) -> Poll<io::Result<usize>> {
        let (answer, written) = self
            .replacing
            .get_or_insert_with(|| (documented(status), 0));
        while *written < answer.len() {
            let n = ready!(Pin::new(&mut self.io).poll_write(cx, &answer[*written..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            *written += n;
        }
        self.replacing = None;
        Poll::Ready(Ok(consumed))
    }
}

impl<IO: Write + Unpin> Write for Documented<IO> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match bare_refusal(buf) {
            Some(status) => self.poll_replace(cx, status, buf.len()),
            None => Pin::new(&mut self.io).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let mut filled = bufs.iter().filter(|buf| !buf.is_empty());
        if let (Some(only), None) = (filled.next(), filled.next())
            && let Some(status) = bare_refusal(only)
        {
            return self.poll_replace(cx, status, only.len());
        }
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::Router;
    use axum::routing::get;
    use hyper::server::conn::http1;
    use hyper_util::rt::TokioIo;
    use hyper_util::service::TowerToHyperService;
    use std::time::Duration;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[test]
    fn only_a_bare_refusal_is_recognised() {
        let date = "date: Sun, 06 Dec 2026 23:00:00 GMT\r\n";
        for (status, reason) in [
            (400, "Bad Request"),
            (414, "URI Too Long"),
            (431, "Request Header Fields Too Large"),
        ] {
            let bare = format!("HTTP/1.1 {status} {reason}\r\ncontent-length: 0\r\n{date}\r\n");
            assert_eq!(
                bare_refusal(bare.as_bytes()).map(|s| s.as_u16()),
                Some(status)
            );
        }
        for other in [
            format!("HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n{date}\r\n"),
            format!(
                "HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\ncontent-length: 0\r\n{date}\r\n"
            ),
            format!("HTTP/1.1 400 Bad Request\r\ncontent-length: 2\r\n{date}\r\n"),
            format!("HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n{date}\r\n{{}}"),
            format!("HTTP/1.1 400 Bad Request\r\n{date}\r\n"),
            "{\"error\": 1}".to_owned(),
        ] {
            assert_eq!(bare_refusal(other.as_bytes()), None, "{other:?}");
        }
    }

    /// One request through a real hyper connection whose I/O is [`Documented`]; the raw answer.
    async fn answer_to(request: &[u8]) -> String {
        let (client, server) = tokio::io::duplex(1 << 20);
        let app = Router::new().route("/", get(|| async { "plain" })).route(
            "/refused",
            get(|| async {
                crate::api::errors::ApiError::bad_request("own_code", "the router's own 400")
            }),
        );
        let serving = tokio::spawn(http1::Builder::new().serve_connection(
            Documented::new(TokioIo::new(server)),
            TowerToHyperService::new(app),
        ));
        let (mut read, mut write) = tokio::io::split(client);
        // Written apart from the read: a server that refuses a head stops reading it.
        let request = request.to_vec();
        let writing = tokio::spawn(async move { write.write_all(&request).await });
        let mut answer = Vec::new();
        tokio::time::timeout(Duration::from_secs(10), read.read_to_end(&mut answer))
            .await
            .expect("the server answers and closes within 10 s")
            .unwrap();
        writing.abort();
        serving.abort();
        String::from_utf8(answer).unwrap()
    }

    #[tokio::test]
    async fn hypers_own_refusals_are_answered_in_the_documented_shape() {
        let long_target = format!("GET /{} HTTP/1.1\r\n\r\n", "a".repeat(70_000));
        let huge_head = format!("GET / HTTP/1.1\r\nx-big: {}\r\n\r\n", "b".repeat(2 << 20));
        for (request, status, code) in [
            (
                b"GET / HTTP/1.1\r\nx-bad: a\0b\r\nconnection: close\r\n\r\n".to_vec(),
                "400 Bad Request",
                "malformed_request",
            ),
            (
                b"NOT HTTP AT ALL\r\n\r\n".to_vec(),
                "400 Bad Request",
                "malformed_request",
            ),
            (long_target.into_bytes(), "414 URI Too Long", "uri_too_long"),
            (
                huge_head.into_bytes(),
                "431 Request Header Fields Too Large",
                "headers_too_large",
            ),
        ] {
            let answer = answer_to(&request).await;
            assert!(
                answer.starts_with(&format!("HTTP/1.1 {status}\r\n")),
                "{answer}"
            );
            assert!(
                answer.contains("content-type: application/json\r\n"),
                "{answer}"
            );
            let body = answer.split_once("\r\n\r\n").unwrap().1;
            let body: serde_json::Value = serde_json::from_str(body).unwrap();
            assert_eq!(body["error"]["code"], code, "{answer}");
        }
    }

    #[tokio::test]
    async fn every_other_answer_passes_untouched() {
        let answer = answer_to(b"GET / HTTP/1.1\r\nconnection: close\r\n\r\n").await;
        assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"), "{answer}");
        assert!(answer.ends_with("\r\n\r\nplain"), "{answer}");
        // The router's own 400 carries its content-type, so it is never taken for hyper's.
        let refused = answer_to(b"GET /refused HTTP/1.1\r\nconnection: close\r\n\r\n").await;
        assert!(
            refused.starts_with("HTTP/1.1 400 Bad Request\r\n"),
            "{refused}"
        );
        assert!(refused.contains("\"own_code\""), "{refused}");
        assert!(!refused.contains("malformed_request"), "{refused}");
    }
}
