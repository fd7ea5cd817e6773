//! One handler per request type: each turns a request into session calls and returns
//! the reply. No handler holds session logic; they convert units (cursor positions) and
//! shapes (MIME bundles, statuses) and nothing else.

use crate::backend::{Backend, CallError, Worker};
use crate::cursor::{byte_offset, char_offset};
use crate::execute::{Counter, Publisher, execute};
use crate::spec::kernel_info;
use crate::wire::{error_reply, iopub};
use jaxrepl::Completeness;
use jupyter_protocol::{
    CommClose, CommInfoReply, CompleteReply, CompleteRequest, InspectReply, InspectRequest,
    IsCompleteReply, JupyterMessage, JupyterMessageContent as C, Media, MediaType, ReplyError,
    ReplyStatus, ShutdownReply,
};

/// What the shell handlers share: the session, the iopub publisher and the execution
/// counter.
pub struct Shell<B> {
    /// The session's owner thread.
    pub worker: Worker<B>,
    /// The iopub task's inbox.
    pub publish: Publisher,
    /// The execution counter.
    pub counter: Counter,
    /// The stdin task's inbox (input requests of running cells).
    pub stdin: tokio::sync::mpsc::UnboundedSender<crate::execute::InputAsk>,
}

/// The result of handling one shell message.
#[derive(Default)]
pub struct Handled {
    /// The reply to send on shell, if the message is a request.
    pub reply: Option<JupyterMessage>,
    /// Whether an execute request failed (for `stop_on_error`).
    pub failed_execute: bool,
    /// Whether the kernel should exit once the reply is sent.
    pub exit: bool,
}

impl<B: Backend + 'static> Shell<B> {
    /// Handles one shell message, publishing iopub side effects, and returns its reply.
    pub async fn handle(&mut self, msg: &JupyterMessage) -> Handled {
        let (mut failed_execute, mut exit) = (false, false);
        let reply = match &msg.content {
            C::KernelInfoRequest(_) => Some(kernel_info().as_child_of(msg)),
            C::ExecuteRequest(req) => {
                let (reply, failed) = execute(&self.worker, &self.publish, &mut self.counter, msg, req, &self.stdin).await;
                failed_execute = failed;
                Some(reply)
            }
            C::IsCompleteRequest(req) => {
                let code = req.code.clone();
                let reply = match self.worker.call(move |s| s.is_complete(&code)).await {
                    Ok(Completeness::Complete) => IsCompleteReply::complete(),
                    Ok(Completeness::Incomplete(indent)) => IsCompleteReply::incomplete(indent),
                    Ok(Completeness::Invalid) => IsCompleteReply::invalid(),
                    Err(_) => IsCompleteReply::unknown(),
                };
                Some(reply.as_child_of(msg))
            }
            C::CompleteRequest(req) => Some(self.complete(req).await.as_child_of(msg)),
            C::InspectRequest(req) => Some(self.inspect(req).await.as_child_of(msg)),
            C::HistoryRequest(_) => Some(jupyter_protocol::HistoryReply::new(vec![]).as_child_of(msg)),
            C::CommInfoRequest(_) => Some(
                CommInfoReply { status: ReplyStatus::Ok, comms: Default::default(), error: None }.as_child_of(msg),
            ),
            C::CommOpen(open) => {
                // No comm targets exist: close it at once, as the spec asks.
                let close = CommClose { comm_id: open.comm_id.clone(), data: Default::default() };
                let _ = self.publish.send(iopub(close, msg));
                None
            }
            C::ShutdownRequest(req) => {
                // Older clients send it on shell rather than control.
                exit = true;
                Some(ShutdownReply { restart: req.restart, status: ReplyStatus::Ok, error: None }.as_child_of(msg))
            }
            // Messages that are not requests need no reply.
            C::CommMsg(_) | C::CommClose(_) | C::InputReply(_) => None,
            _ => unknown_request(msg),
        };
        Handled { reply, failed_execute, exit }
    }

    async fn complete(&self, req: &CompleteRequest) -> CompleteReply {
        let code = req.code.clone();
        let cursor = byte_offset(&code, req.cursor_pos);
        match self.worker.call(move |s| s.complete(&code, cursor)).await {
            Ok(c) => {
                let (start, end) = (c.start.min(c.end), c.end.max(c.start));
                CompleteReply {
                    matches: c.matches,
                    cursor_start: char_offset(&req.code, start),
                    cursor_end: char_offset(&req.code, end),
                    metadata: Default::default(),
                    status: ReplyStatus::Ok,
                    error: None,
                }
            }
            Err(e) => CompleteReply {
                cursor_start: req.cursor_pos,
                cursor_end: req.cursor_pos,
                status: ReplyStatus::Error,
                error: Some(Box::new(call_error(&e))),
                ..Default::default()
            },
        }
    }

    async fn inspect(&self, req: &InspectRequest) -> InspectReply {
        let code = req.code.clone();
        let cursor = byte_offset(&code, req.cursor_pos);
        match self.worker.call(move |s| s.inspect(&code, cursor)).await {
            Ok(found) => InspectReply {
                found: found.is_some(),
                data: found.map(|text| Media::new(vec![MediaType::Plain(text)])).unwrap_or_default(),
                ..Default::default()
            },
            Err(e) => InspectReply {
                status: ReplyStatus::Error,
                error: Some(Box::new(call_error(&e))),
                ..Default::default()
            },
        }
    }
}

/// The reply to a request type the kernel does not implement: an error of the right
/// reply type, or nothing for messages that are not requests.
pub fn unknown_request(msg: &JupyterMessage) -> Option<JupyterMessage> {
    let msg_type = msg.header.msg_type.as_str();
    msg_type.ends_with("_request").then(|| {
        error_reply(msg, "NotImplemented", &format!("jaxrepl-kernel does not handle {msg_type}"))
    })
}

fn call_error(e: &CallError) -> ReplyError {
    let ename = match e {
        CallError::Unavailable(_) => "SessionUnavailable",
        CallError::Panicked(_) => "SessionPanicked",
    };
    ReplyError { ename: ename.into(), evalue: e.to_string(), traceback: vec![] }
}
