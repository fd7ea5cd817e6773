//! The execute request: counting, `execute_input`, routing the session's outputs to
//! iopub, and the reply.
//!
//! Rules kept here (protocol spec and frontends.md §8):
//! - `execution_count` increases only for `store_history && !silent`; a silent request
//!   publishes no `execute_input` and does not show the cell's value.
//! - The cell's value is the session's last display when nothing followed it and it has
//!   `text/plain`: it becomes the `execute_result`; every other display is `display_data`.
//!   `execute_result` carries `transient: {}`, never `null` (which fails the schema).
//! - A failed or interrupted cell always shows exactly one `error` output and replies
//!   `status: error` with the same ename/evalue/traceback; when the session reported no
//!   error output, one is made from what is known.

use crate::backend::{Backend, CallError, Worker};
use crate::wire::{has_plain_text, iopub, media, reply_error};
use jaxrepl::{ExecStatus, Output};
use jupyter_protocol::{
    ClearOutput, DisplayData, ErrorOutput, ExecuteInput, ExecuteReply, ExecuteRequest, ExecuteResult,
    ExecutionCount, JupyterMessage, ReplyError, ReplyStatus, StreamContent, Transient,
    UpdateDisplayData,
};
use tokio::sync::mpsc::UnboundedSender;

/// Where iopub messages go: the single task that owns the iopub socket.
pub type Publisher = UnboundedSender<JupyterMessage>;

/// Turns one cell's session outputs into iopub messages, in order.
pub struct OutputRouter {
    parent: JupyterMessage,
    count: ExecutionCount,
    silent: bool,
    publish: Publisher,
    /// The latest display, held back until we know whether it is the cell's value.
    held: Option<Vec<(String, String)>>,
    /// The first error output of the cell, which the reply repeats.
    error: Option<ReplyError>,
    /// Progress displays created in this cell: display id, and whether it is done.
    progress_ids: Vec<(String, bool)>,
    /// Whether anything but progress has been published for this cell (then a finished
    /// progress display is emptied, not cleared away).
    shown_other: bool,
}

impl OutputRouter {
    /// A router for the execute request `parent`, numbered `count`.
    pub fn new(parent: JupyterMessage, count: ExecutionCount, silent: bool, publish: Publisher) -> Self {
        OutputRouter { parent, count, silent, publish, held: None, error: None, progress_ids: Vec::new(), shown_other: false }
    }

    /// Routes one output; outputs are published in the order they are pushed.
    pub fn push(&mut self, out: Output) {
        if let Output::Progress { id, text, done } = out {
            // Progress does not release a held display: it never follows the cell's value.
            return self.send_progress(&id, &text, done);
        }
        if let Some(display) = self.held.take() {
            self.send_display(display);
        }
        self.shown_other |= matches!(out, Output::Stdout(_) | Output::Stderr(_) | Output::Error { .. });
        match out {
            Output::Stdout(text) => self.send(StreamContent::stdout(&text)),
            Output::Stderr(text) => self.send(StreamContent::stderr(&text)),
            Output::Display(bundle) => self.held = Some(bundle),
            Output::Error { ename, evalue, traceback } => self.send_error(ename, evalue, traceback),
            Output::Progress { .. } => {}
        }
    }

    /// A progress event: the first of an id is a `display_data` with a display id, later ones
    /// `update_display_data` of it. When the last progress display is done and nothing else
    /// has been shown in the cell yet, a `clear_output` removes the progress displays, so
    /// the cell's outputs start with its own (no empty `display_data` before them);
    /// otherwise the finished display is emptied, so a saved notebook keeps no timing
    /// text. Silent requests show no progress.
    fn send_progress(&mut self, id: &str, text: &str, done: bool) {
        if self.silent {
            return;
        }
        let display_id = format!("jaxrepl-progress-{id}");
        if done && let Some(entry) = self.progress_ids.iter_mut().find(|(d, _)| d == &display_id) {
            entry.1 = true;
            if !self.shown_other && self.progress_ids.iter().all(|(_, done)| *done) {
                self.progress_ids.clear();
                return self.send(ClearOutput { wait: false });
            }
        }
        let body = if done { String::new() } else { text.to_string() };
        let data = media(&[("text/plain".to_string(), body)]);
        if self.progress_ids.iter().any(|(d, _)| d == &display_id) {
            self.send(UpdateDisplayData {
                data,
                metadata: Default::default(),
                transient: Transient { display_id: Some(display_id) },
            });
        } else if !done {
            self.progress_ids.push((display_id.clone(), false));
            self.send(DisplayData {
                data,
                metadata: Default::default(),
                transient: Some(Transient { display_id: Some(display_id) }),
            });
        }
    }

    /// Ends the cell: publishes what is held (as the `execute_result` if it qualifies),
    /// makes sure a failed cell has its error output, and returns the reply's error
    /// (`None` for a successful cell).
    pub fn finish(mut self, status: &ExecStatus) -> Option<ReplyError> {
        if let Some(display) = self.held.take() {
            let is_value = matches!(status, ExecStatus::Ok) && has_plain_text(&display);
            if is_value && self.silent {
                // A silent cell's value is not shown at all (as with IPython's displayhook).
            } else if is_value {
                self.send(ExecuteResult {
                    execution_count: self.count,
                    data: media(&display),
                    metadata: Default::default(),
                    transient: Some(Transient::default()),
                });
            } else {
                self.send_display(display);
            }
        }
        match status {
            ExecStatus::Ok => None,
            ExecStatus::Error => Some(self.ensure_error("Error", "the cell failed")),
            ExecStatus::Interrupted => Some(self.ensure_error("Interrupted", "the cell was interrupted")),
        }
    }

    /// Ends a cell whose session call failed outright (session unavailable or panicked).
    pub fn fail(mut self, err: &CallError) -> ReplyError {
        if let Some(display) = self.held.take() {
            self.send_display(display);
        }
        let ename = match err {
            CallError::Unavailable(_) => "SessionUnavailable",
            CallError::Panicked(_) => "SessionPanicked",
        };
        self.ensure_error(ename, &err.to_string())
    }

    fn ensure_error(&mut self, ename: &str, evalue: &str) -> ReplyError {
        if self.error.is_none() {
            self.send_error(ename.into(), evalue.into(), vec![format!("{ename}: {evalue}")]);
        }
        self.error.clone().unwrap_or_else(|| reply_error(ename, evalue, vec![]))
    }

    fn send_error(&mut self, ename: String, evalue: String, traceback: Vec<String>) {
        if self.error.is_none() {
            self.error = Some(reply_error(&ename, &evalue, traceback.clone()));
        }
        self.send(ErrorOutput { ename, evalue, traceback });
    }

    fn send_display(&mut self, bundle: Vec<(String, String)>) {
        self.shown_other = true;
        self.send(DisplayData { data: media(&bundle), metadata: Default::default(), transient: None });
    }

    fn send(&self, content: impl Into<jupyter_protocol::JupyterMessageContent>) {
        // The receiver lives as long as the kernel; a send error means we are exiting.
        let _ = self.publish.send(iopub(content, &self.parent));
    }
}

/// The execution counter of a kernel: the number of cells stored in history so far.
#[derive(Debug, Default)]
pub struct Counter(usize);

impl Counter {
    /// The count for `req`: the next number if it is stored in history, else the current.
    pub fn for_request(&mut self, req: &ExecuteRequest) -> ExecutionCount {
        if req.store_history && !req.silent {
            self.0 += 1;
        }
        ExecutionCount::new(self.0)
    }
}

/// Runs the execute request `msg` (content `req`) on the session, publishing its iopub
/// traffic (not `busy`/`idle`, which the shell loop owns), and returns the reply and
/// whether the cell failed.
/// One request for a line of input: the execute request it belongs to, the prompt, and
/// where the answer goes (`None`: no answer, end of input).
pub type InputAsk = (JupyterMessage, String, std::sync::mpsc::Sender<Option<String>>);

pub async fn execute<B: Backend + 'static>(
    worker: &Worker<B>,
    publish: &Publisher,
    counter: &mut Counter,
    msg: &JupyterMessage,
    req: &ExecuteRequest,
    stdin: &tokio::sync::mpsc::UnboundedSender<InputAsk>,
) -> (JupyterMessage, bool) {
    let count = counter.for_request(req);
    let number = counter.0 as u64;
    if !req.silent {
        let _ = publish.send(iopub(ExecuteInput { code: req.code.clone(), execution_count: count }, msg));
    }
    let mut router = OutputRouter::new(msg.clone(), count, req.silent, publish.clone());
    let code = req.code.clone();
    // Input requests (debug::breakpoint!) become `input_request`s on the stdin channel
    // when the client allows stdin; otherwise they get end of input.
    let ask = req.allow_stdin.then(|| (stdin.clone(), msg.clone()));
    let result = worker
        .call(move |session| {
            let mut input = |prompt: &str| -> Option<String> {
                let (tx, parent) = ask.as_ref()?;
                let (answer_tx, answer_rx) = std::sync::mpsc::channel();
                tx.send((parent.clone(), prompt.to_string(), answer_tx)).ok()?;
                answer_rx.recv().ok().flatten()
            };
            session.set_execution_count(number);
            let status = session.execute_with_input(&code, &mut |out| router.push(out), &mut input);
            router.finish(&status)
        })
        .await;
    let error = match result {
        Ok(error) => error,
        // The router moved into the failed call; a fresh one publishes the error.
        Err(err) => Some(OutputRouter::new(msg.clone(), count, req.silent, publish.clone()).fail(&err)),
    };
    let failed = error.is_some();
    let reply = ExecuteReply {
        status: if failed { ReplyStatus::Error } else { ReplyStatus::Ok },
        execution_count: count,
        payload: vec![],
        user_expressions: Some(Default::default()),
        error: error.map(Box::new),
    };
    (reply.as_child_of(msg), failed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use jupyter_protocol::JupyterMessageContent as C;

    fn router(silent: bool) -> (OutputRouter, tokio::sync::mpsc::UnboundedReceiver<JupyterMessage>) {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let parent = JupyterMessage::new(ExecuteRequest::new("cell".into()), None);
        (OutputRouter::new(parent, ExecutionCount::new(7), silent, tx), rx)
    }

    fn drain(mut rx: tokio::sync::mpsc::UnboundedReceiver<JupyterMessage>) -> Vec<String> {
        let mut types = vec![];
        while let Ok(m) = rx.try_recv() {
            types.push(m.header.msg_type.clone());
        }
        types
    }

    fn plain(text: &str) -> Output {
        Output::Display(vec![("text/plain".into(), text.into())])
    }

    #[test]
    fn last_plain_display_is_the_execute_result() {
        let (mut r, mut rx) = router(false);
        r.push(Output::Stdout("hi\n".into()));
        r.push(plain("3"));
        assert!(r.finish(&ExecStatus::Ok).is_none());
        let _stream = rx.try_recv().unwrap();
        let m = rx.try_recv().unwrap();
        let C::ExecuteResult(res) = &m.content else { panic!("{:?}", m.content) };
        assert_eq!(res.execution_count, ExecutionCount::new(7));
        let v = serde_json::to_value(&m.content).unwrap();
        assert_eq!(v["data"]["text/plain"], "3");
        assert_eq!(v["transient"], serde_json::json!({}));
        assert_eq!(m.zmq_identities[0].as_ref(), b"kernel.jaxrepl.execute_result");
    }

    #[test]
    fn displays_followed_by_output_or_without_text_are_display_data() {
        let (mut r, rx) = router(false);
        r.push(plain("first"));
        r.push(Output::Stdout("after\n".into()));
        r.push(Output::Display(vec![("image/svg+xml".into(), "<svg/>".into())]));
        r.finish(&ExecStatus::Ok);
        assert_eq!(drain(rx), ["display_data", "stream", "display_data"]);
    }

    #[test]
    fn silent_cells_show_no_value() {
        let (mut r, rx) = router(true);
        r.push(Output::Display(vec![("text/html".into(), "<b>shown</b>".into())]));
        r.push(plain("3"));
        r.finish(&ExecStatus::Ok);
        assert_eq!(drain(rx), ["display_data"]);
    }

    #[test]
    fn errors_appear_once_and_are_repeated_in_the_reply() {
        let (mut r, rx) = router(false);
        r.push(Output::Error { ename: "E0425".into(), evalue: "cannot find value `y`".into(), traceback: vec!["l1".into()] });
        let e = r.finish(&ExecStatus::Error).unwrap();
        assert_eq!((e.ename.as_str(), e.evalue.as_str()), ("E0425", "cannot find value `y`"));
        assert_eq!(drain(rx), ["error"]);
        // a failure the session did not describe still shows one error
        let (r, rx) = router(false);
        let e = r.finish(&ExecStatus::Interrupted).unwrap();
        assert_eq!(e.ename, "Interrupted");
        assert_eq!(drain(rx), ["error"]);
    }

    #[test]
    fn progress_before_any_output_is_cleared_away_when_done() {
        let (mut r, mut rx) = router(false);
        let progress = |id: &str, done: bool| Output::Progress { id: id.into(), text: "building".into(), done };
        r.push(progress("cell-1", false));
        r.push(progress("compile-1", false));
        r.push(progress("cell-1", true));
        r.push(progress("compile-1", true));
        r.push(plain("2"));
        r.finish(&ExecStatus::Ok);
        let mut seen = vec![];
        while let Ok(m) = rx.try_recv() {
            seen.push(m.header.msg_type.clone());
        }
        // Both displays are cleared once both are done: no empty display_data stays.
        assert_eq!(seen, ["display_data", "display_data", "update_display_data", "clear_output", "execute_result"]);
    }

    #[test]
    fn progress_is_one_display_updated_in_place_and_emptied() {
        let (mut r, mut rx) = router(false);
        let progress = |text: &str, done: bool| Output::Progress { id: "compile-3".into(), text: text.into(), done };
        r.push(Output::Stdout("printed first\n".into()));
        r.push(progress("compiling jit(f): 1.0 s", false));
        r.push(progress("compiling jit(f): 1.5 s", false));
        r.push(plain("3"));
        r.push(progress("compiled jit(f) in 1.6 s", true));
        r.finish(&ExecStatus::Ok);
        let mut seen = vec![];
        while let Ok(m) = rx.try_recv() {
            let v = serde_json::to_value(&m.content).unwrap();
            seen.push((m.header.msg_type.clone(), v["data"]["text/plain"].clone(), v["transient"]["display_id"].clone()));
        }
        let id = serde_json::json!("jaxrepl-progress-compile-3");
        // After other output, a clear would lose it: the display is emptied instead.
        assert_eq!(seen.remove(0).0, "stream");
        assert_eq!(seen[0], ("display_data".to_string(), serde_json::json!("compiling jit(f): 1.0 s"), id.clone()));
        assert_eq!(seen[1], ("update_display_data".to_string(), serde_json::json!("compiling jit(f): 1.5 s"), id.clone()));
        assert_eq!(seen[2], ("update_display_data".to_string(), serde_json::json!(""), id));
        // The cell's value is still its execute_result, after the progress events.
        assert_eq!(seen[3].0, "execute_result");
        assert_eq!(seen.len(), 4);
    }

    #[test]
    fn count_rules() {
        let mut c = Counter::default();
        let mut req = ExecuteRequest::new("x".into());
        assert_eq!(c.for_request(&req), ExecutionCount::new(1));
        req.silent = true;
        assert_eq!(c.for_request(&req), ExecutionCount::new(1));
        req.silent = false;
        req.store_history = false;
        assert_eq!(c.for_request(&req), ExecutionCount::new(1));
        req.store_history = true;
        assert_eq!(c.for_request(&req), ExecutionCount::new(2));
    }
}
