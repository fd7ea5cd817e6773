//! Message plumbing shared by all channels: reading requests, addressing iopub messages,
//! MIME bundles, and replies for requests the kernel cannot honour.
//!
//! Reading is done here rather than with `Connection::read` so that a request whose
//! content does not parse still gets an error reply (its header is enough to address
//! one): the kernel never leaves a request without a reply. Messages with a bad
//! signature are dropped unanswered, as the protocol requires.

use bytes::Bytes;
use jupyter_protocol::{
    Header, JupyterMessage, JupyterMessageContent, Media, MediaType, ReplyError, UnknownMessage,
};
use jupyter_zmq_client::{Connection, RawMessage};
use serde_json::{Value, json};
use zeromq::SocketRecv;

/// One message read from a ROUTER socket.
#[allow(clippy::large_enum_variant)] // one per message read, moved once: boxing buys nothing
pub enum Incoming {
    /// A well-formed, correctly signed message.
    Message(JupyterMessage),
    /// A signed message whose content does not parse as its type; `reply` answers it.
    Malformed {
        /// The request, with its content kept as raw JSON.
        request: JupyterMessage,
        /// An error reply addressed to `request`.
        reply: JupyterMessage,
    },
    /// Unsigned, badly signed or unparsable framing: dropped, with the reason.
    Dropped(String),
    /// The socket is closed.
    Closed(String),
}

/// Reads the next message from a kernel ROUTER socket (shell or control).
pub async fn read_request<S: SocketRecv>(conn: &mut Connection<S>) -> Incoming {
    let frames = match conn.socket.recv().await {
        Ok(frames) => frames,
        Err(e) => return Incoming::Closed(e.to_string()),
    };
    let raw = match RawMessage::from_multipart(frames, &conn.mac) {
        Ok(raw) => raw,
        Err(e) => return Incoming::Dropped(format!("bad framing or signature: {e}")),
    };
    decode(raw)
}

fn decode(raw: RawMessage) -> Incoming {
    let header: Header = match serde_json::from_slice(&raw.jparts[0]) {
        Ok(h) => h,
        Err(e) => return Incoming::Dropped(format!("unparsable header: {e}")),
    };
    let parent_header = serde_json::from_slice(&raw.jparts[1]).ok();
    let metadata = serde_json::from_slice(&raw.jparts[2]).unwrap_or_else(|_| json!({}));
    let content: Value = serde_json::from_slice(&raw.jparts[3]).unwrap_or(Value::Null);
    let parsed = JupyterMessageContent::from_type_and_content(&header.msg_type, content.clone());
    let mut message = JupyterMessage {
        zmq_identities: raw.zmq_identities,
        header,
        parent_header,
        metadata,
        content: JupyterMessageContent::UnknownMessage(UnknownMessage::default()),
        buffers: raw.jparts[4..].to_vec(),
        channel: None,
    };
    match parsed {
        Ok(content) => {
            message.content = content;
            Incoming::Message(message)
        }
        Err(e) => {
            let msg_type = message.header.msg_type.clone();
            message.content =
                JupyterMessageContent::UnknownMessage(UnknownMessage { msg_type, content });
            let reply = error_reply(&message, "BadRequest", &format!("malformed content: {e}"));
            Incoming::Malformed { request: message, reply }
        }
    }
}

/// The `*_reply` type that answers a `*_request` type.
pub fn reply_type(request_type: &str) -> String {
    match request_type.strip_suffix("_request") {
        Some(stem) => format!("{stem}_reply"),
        None => format!("{request_type}_reply"),
    }
}

/// An error reply of the right type for `request`, for requests that cannot be honoured
/// (unknown type, malformed content). An `execute_reply` also carries `execution_count`.
pub fn error_reply(request: &JupyterMessage, ename: &str, evalue: &str) -> JupyterMessage {
    let msg_type = reply_type(&request.header.msg_type);
    let mut content = json!({"status": "error", "ename": ename, "evalue": evalue, "traceback": []});
    if msg_type == "execute_reply" {
        content["execution_count"] = json!(0);
    }
    JupyterMessage::new(UnknownMessage { msg_type, content }, Some(request))
}

/// An iopub message caused by `parent`, published under the topic `kernel.<id>.<type>`.
///
/// Without setting the topic, `as_child_of` would copy the shell client's ROUTER identity
/// in as the PUB topic (harmless to subscribers of everything, but wrong).
pub fn iopub(content: impl Into<JupyterMessageContent>, parent: &JupyterMessage) -> JupyterMessage {
    let mut m = JupyterMessage::new(content, Some(parent));
    m.zmq_identities = vec![Bytes::from(format!("kernel.jaxrepl.{}", m.header.msg_type))];
    m
}

/// The Jupyter form of a session display bundle: `(mime, data)` pairs in the session's
/// order. JSON mime types (`application/json`, `application/*+json`) carry parsed JSON
/// when the data parses, text otherwise; every other mime type carries the text as is
/// (images are already base64).
pub fn media(bundle: &[(String, String)]) -> Media {
    Media::new(bundle.iter().map(|(mime, data)| media_type(mime, data)).collect())
}

fn media_type(mime: &str, data: &str) -> MediaType {
    let text = || data.to_string();
    match mime {
        "text/plain" => MediaType::Plain(text()),
        "text/html" => MediaType::Html(text()),
        "text/markdown" => MediaType::Markdown(text()),
        "text/latex" => MediaType::Latex(text()),
        "image/svg+xml" => MediaType::Svg(text()),
        "image/png" => MediaType::Png(text()),
        "image/jpeg" => MediaType::Jpeg(text()),
        "image/gif" => MediaType::Gif(text()),
        _ if is_json_mime(mime) => match serde_json::from_str::<Value>(data) {
            Ok(v) => MediaType::Other((mime.to_string(), v)),
            Err(_) => MediaType::Other((mime.to_string(), Value::String(text()))),
        },
        _ => MediaType::Other((mime.to_string(), Value::String(text()))),
    }
}

fn is_json_mime(mime: &str) -> bool {
    mime == "application/json" || (mime.starts_with("application/") && mime.ends_with("+json"))
}

/// Whether a bundle has a `text/plain` entry (the condition for an `execute_result`).
pub fn has_plain_text(bundle: &[(String, String)]) -> bool {
    bundle.iter().any(|(mime, _)| mime == "text/plain")
}

/// A [`ReplyError`] from its three parts.
pub fn reply_error(ename: &str, evalue: &str, traceback: Vec<String>) -> ReplyError {
    ReplyError { ename: ename.into(), evalue: evalue.into(), traceback }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wire(m: &Media) -> Value {
        serde_json::to_value(m).unwrap()
    }

    #[test]
    fn bundles_keep_text_and_parse_json() {
        let b = vec![
            ("text/plain".to_string(), "Array([1., 2.], dtype=float32)".to_string()),
            ("text/html".to_string(), "<table></table>".to_string()),
            ("application/json".to_string(), r#"{"a": 1}"#.to_string()),
            ("application/vnd.jaxrepl.layout+json".to_string(), "not json".to_string()),
        ];
        let v = wire(&media(&b));
        assert_eq!(v["text/plain"], "Array([1., 2.], dtype=float32)");
        assert_eq!(v["text/html"], "<table></table>");
        assert_eq!(v["application/json"], json!({"a": 1}));
        assert_eq!(v["application/vnd.jaxrepl.layout+json"], "not json");
    }

    #[test]
    fn reply_types() {
        assert_eq!(reply_type("execute_request"), "execute_reply");
        assert_eq!(reply_type("frobnicate"), "frobnicate_reply");
    }

    #[test]
    fn malformed_request_gets_an_addressed_error_reply() {
        let header = json!({"msg_id": "m1", "username": "u", "session": "s", "date": "2024-01-01T00:00:00Z",
                            "msg_type": "execute_request", "version": "5.3"});
        let raw = RawMessage {
            zmq_identities: vec![Bytes::from_static(b"client")],
            jparts: vec![
                Bytes::from(header.to_string()),
                Bytes::from_static(b"{}"),
                Bytes::from_static(b"{}"),
                Bytes::from_static(b"{\"silent\": 3}"),
            ],
        };
        let Incoming::Malformed { reply, .. } = decode(raw) else { panic!("expected Malformed") };
        assert_eq!(reply.header.msg_type, "execute_reply");
        assert_eq!(reply.parent_header.as_ref().unwrap().msg_id, "m1");
        assert_eq!(reply.zmq_identities, vec![Bytes::from_static(b"client")]);
        let content = serde_json::to_value(&reply.content).unwrap();
        assert_eq!(content["status"], "error");
        assert_eq!(content["ename"], "BadRequest");
        assert_eq!(content["execution_count"], 0);
    }
}
