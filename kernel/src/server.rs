//! Sockets and tasks: the running kernel.
//!
//! ```text
//! run(connection file, start session)
//!  ├─ bind hb (REP), shell, control, stdin (ROUTER), iopub (XPUB); then start the session thread
//!  ├─ task heartbeat: echo every ping back unchanged
//!  ├─ task iopub:     sole owner of the XPUB socket, so order is send order; answers each
//!  │                  subscription with iopub_welcome (JEP 65: no slow-joiner losses)
//!  ├─ task control:   kernel_info | interrupt (→ session interrupt) | shutdown (reply, then exit)
//!  ├─ task shell:     one message at a time: busy → handler (iopub outputs) → reply → idle
//!  ├─ task signals:   SIGINT → interrupt; SIGTERM → orderly exit
//!  └─ task parent:    exit when the process that started us dies (its pid is gone from getppid)
//! ```
//! Evaluation never runs on the runtime: the session lives on its own thread
//! ([`crate::backend::Worker`]), so control answers while a cell runs. If any task ends
//! unexpectedly the kernel exits non-zero rather than stop answering; the client then
//! reports a dead kernel and offers a restart.

use crate::backend::{Backend, Worker};
use crate::execute::{Counter, Publisher};
use crate::handlers::{Shell, unknown_request};
use crate::spec::kernel_info;
use crate::wire::{Incoming, iopub, read_request};
use anyhow::{Context, bail};
use jupyter_protocol::{
    ConnectionInfo, ExecuteReply, InputRequest, InterruptReply, IoPubWelcome, JupyterMessage,
    JupyterMessageContent as C, ReplyStatus, ShutdownReply, Status,
};
use jupyter_zmq_client::{
    KernelControlConnection, KernelHeartbeatConnection, KernelIoPubXPubConnection,
    KernelShellConnection, KernelStdinConnection, SubscriptionEvent, create_kernel_control_connection,
    create_kernel_heartbeat_connection, create_kernel_iopub_xpub_connection,
    create_kernel_shell_connection, create_kernel_stdin_connection,
};
use std::collections::VecDeque;
use std::path::Path;
use std::time::Duration;
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};
use zeromq::{SocketRecv as _, SocketSend as _};

/// How long an exiting kernel waits for the running cell before dropping the session.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(3);

/// Runs the kernel described by `connection_file` until it is asked to shut down (then the
/// process exits 0), with the session made by `start` on the session thread.
pub fn run<B, F>(connection_file: &Path, start: F) -> anyhow::Result<()>
where
    B: Backend + 'static,
    F: FnOnce() -> anyhow::Result<B> + Send + 'static,
{
    let text = std::fs::read_to_string(connection_file)
        .with_context(|| format!("reading the connection file {}", connection_file.display()))?;
    let info: ConnectionInfo = serde_json::from_str(&text).context("parsing the connection file")?;
    if !info.key.is_empty() && info.signature_scheme != "hmac-sha256" {
        bail!("signature scheme {:?} is not supported; use hmac-sha256", info.signature_scheme);
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .thread_name("jaxrepl-kernel-io")
        .build()?;
    runtime.block_on(serve(info, start))
}

async fn serve<B, F>(info: ConnectionInfo, start: F) -> anyhow::Result<()>
where
    B: Backend + 'static,
    F: FnOnce() -> anyhow::Result<B> + Send + 'static,
{
    let session_id = uuid::Uuid::new_v4().to_string();
    let hb = create_kernel_heartbeat_connection(&info).await.context("binding heartbeat")?;
    let shell = create_kernel_shell_connection(&info, &session_id).await.context("binding shell")?;
    let control = create_kernel_control_connection(&info, &session_id).await.context("binding control")?;
    let stdin = create_kernel_stdin_connection(&info, &session_id).await.context("binding stdin")?;
    let iopub_socket = create_kernel_iopub_xpub_connection(&info, &session_id).await.context("binding iopub")?;

    let worker = Worker::spawn(start);
    let (publish, outbox) = unbounded_channel();
    let (shutdown_tx, mut shutdown_rx) = unbounded_channel::<()>();
    let (stdin_tx, stdin_rx) = unbounded_channel();
    let shell_state = Shell { worker: worker.clone(), publish, counter: Counter::default(), stdin: stdin_tx };
    // Not in `tasks`: it ends only with the kernel, and its end must not stop the kernel.
    tokio::spawn(stdin_loop(stdin, stdin_rx));

    let mut tasks = tokio::task::JoinSet::new();
    tasks.spawn(heartbeat(hb));
    tasks.spawn(iopub_owner(iopub_socket, outbox));
    tasks.spawn(control_loop(control, worker.clone(), shutdown_tx.clone()));
    tasks.spawn(shell_loop(shell, shell_state, shutdown_tx.clone()));
    tokio::spawn(signals(worker.clone(), shutdown_tx.clone()));
    tokio::spawn(watch_parent(shutdown_tx));

    let code = tokio::select! {
        _ = shutdown_rx.recv() => 0,
        ended = tasks.join_next() => {
            eprintln!("jaxrepl-kernel: a socket task ended unexpectedly ({ended:?}); exiting");
            1
        }
    };
    worker.shut_down(SHUTDOWN_GRACE).await;
    // Replies were handed to the sockets; give them a moment to reach the wire.
    tokio::time::sleep(Duration::from_millis(100)).await;
    std::process::exit(code);
}

/// Owns the stdin socket: sends each cell's `input_request` (a child of its execute
/// request, so it reaches that client) and hands back the `input_reply`'s value.
async fn stdin_loop(mut stdin: KernelStdinConnection, mut asks: UnboundedReceiver<crate::execute::InputAsk>) {
    while let Some((parent, prompt, answer)) = asks.recv().await {
        let request = InputRequest { prompt, password: false }.as_child_of(&parent);
        if stdin.send(request).await.is_err() {
            let _ = answer.send(None);
            continue;
        }
        let value = loop {
            match stdin.read().await {
                Ok(m) => {
                    if let C::InputReply(r) = m.content {
                        break Some(r.value);
                    }
                }
                Err(_) => break None,
            }
        };
        let _ = answer.send(value);
    }
}

/// Echoes heartbeat requests unchanged (the spec; jupyter-zmq-client's helper sends "pong").
async fn heartbeat(mut hb: KernelHeartbeatConnection) {
    while let Ok(ping) = hb.socket.recv().await {
        if hb.socket.send(ping).await.is_err() {
            break;
        }
    }
}

/// Owns the iopub socket: publishes what the other tasks send, in order, and welcomes
/// each new subscriber.
async fn iopub_owner(mut socket: KernelIoPubXPubConnection, mut outbox: UnboundedReceiver<JupyterMessage>) {
    loop {
        tokio::select! {
            message = outbox.recv() => match message {
                Some(m) => {
                    if let Err(e) = socket.send(m).await {
                        eprintln!("jaxrepl-kernel: iopub send failed: {e}");
                    }
                }
                None => break,
            },
            event = socket.recv_subscription() => match event {
                Ok(SubscriptionEvent::Subscribe(topic)) => {
                    let _ = socket.send(IoPubWelcome::new(topic).into()).await;
                }
                Ok(SubscriptionEvent::Unsubscribe(_)) => {}
                Err(e) => {
                    eprintln!("jaxrepl-kernel: iopub subscription: {e}");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            },
        }
    }
}

/// The control channel: answered at once, even while a cell runs.
async fn control_loop<B: Backend + 'static>(
    mut control: KernelControlConnection,
    worker: Worker<B>,
    shutdown: UnboundedSender<()>,
) {
    loop {
        let msg = match read_request(&mut control).await {
            Incoming::Message(m) => m,
            Incoming::Malformed { reply, .. } => {
                let _ = control.send(reply).await;
                continue;
            }
            Incoming::Dropped(why) => {
                eprintln!("jaxrepl-kernel: control: dropped a message: {why}");
                continue;
            }
            Incoming::Closed(why) => {
                eprintln!("jaxrepl-kernel: control socket closed: {why}");
                return;
            }
        };
        let mut exit = false;
        let reply = match &msg.content {
            C::KernelInfoRequest(_) => Some(kernel_info().as_child_of(&msg)),
            C::InterruptRequest(_) => {
                worker.interrupt();
                Some(InterruptReply::new().as_child_of(&msg))
            }
            C::ShutdownRequest(req) => {
                exit = true;
                Some(ShutdownReply { restart: req.restart, status: ReplyStatus::Ok, error: None }.as_child_of(&msg))
            }
            _ => unknown_request(&msg),
        };
        if let Some(reply) = reply
            && let Err(e) = control.send(reply).await
        {
            eprintln!("jaxrepl-kernel: control send failed: {e}");
        }
        if exit {
            let _ = shutdown.send(());
        }
    }
}

/// The shell channel: one message at a time, bracketed by busy and idle.
async fn shell_loop<B: Backend + 'static>(
    mut shell: KernelShellConnection,
    mut state: Shell<B>,
    shutdown: UnboundedSender<()>,
) {
    let mut queued: VecDeque<JupyterMessage> = VecDeque::new();
    loop {
        let msg = match queued.pop_front() {
            Some(m) => m,
            None => match read_request(&mut shell).await {
                Incoming::Message(m) => m,
                Incoming::Malformed { request, reply } => {
                    let _ = state.publish.send(iopub(Status::busy(), &request));
                    let _ = shell.send(reply).await;
                    let _ = state.publish.send(iopub(Status::idle(), &request));
                    continue;
                }
                Incoming::Dropped(why) => {
                    eprintln!("jaxrepl-kernel: shell: dropped a message: {why}");
                    continue;
                }
                Incoming::Closed(why) => {
                    eprintln!("jaxrepl-kernel: shell socket closed: {why}");
                    return;
                }
            },
        };
        let _ = state.publish.send(iopub(Status::busy(), &msg));
        let handled = state.handle(&msg).await;
        if let Some(reply) = handled.reply
            && let Err(e) = shell.send(reply).await
        {
            eprintln!("jaxrepl-kernel: shell send failed: {e}");
        }
        // Before idle: a client that waits for idle before its next request (nbclient,
        // consoles) cannot have sent one yet, so only pipelined requests are aborted.
        if handled.failed_execute && stops_on_error(&msg) {
            abort_queued(&mut shell, &state.publish, &mut queued).await;
        }
        let _ = state.publish.send(iopub(Status::idle(), &msg));
        if handled.exit {
            let _ = shutdown.send(());
        }
    }
}

fn stops_on_error(msg: &JupyterMessage) -> bool {
    matches!(&msg.content, C::ExecuteRequest(req) if req.stop_on_error)
}

/// After a failed cell with `stop_on_error`, answers the execute requests that have
/// already arrived with `aborted` (as ipykernel does); other requests that have arrived
/// are kept, in order, for normal handling. Nothing is waited for.
async fn abort_queued(shell: &mut KernelShellConnection, publish: &Publisher, queued: &mut VecDeque<JupyterMessage>) {
    while let Some(incoming) = poll_once(read_request(shell)) {
        match incoming {
            Incoming::Message(m) if matches!(m.content, C::ExecuteRequest(_)) => {
                let _ = publish.send(iopub(Status::busy(), &m));
                let reply = ExecuteReply { status: ReplyStatus::Aborted, user_expressions: Some(Default::default()), ..Default::default() };
                let _ = shell.send(reply.as_child_of(&m)).await;
                let _ = publish.send(iopub(Status::idle(), &m));
            }
            Incoming::Message(m) => queued.push_back(m),
            Incoming::Malformed { reply, .. } => {
                let _ = shell.send(reply).await;
            }
            Incoming::Dropped(_) => {}
            Incoming::Closed(_) => break,
        }
    }
}

/// The value of `future` if it is ready at its first poll (the future is then dropped).
fn poll_once<F: std::future::Future>(future: F) -> Option<F::Output> {
    let mut future = std::pin::pin!(future);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    match future.as_mut().poll(&mut cx) {
        std::task::Poll::Ready(value) => Some(value),
        std::task::Poll::Pending => None,
    }
}

/// SIGINT interrupts the running cell (clients in `interrupt_mode: signal`, or a Ctrl-C in
/// the terminal that started us); SIGTERM asks for an orderly exit.
async fn signals<B: Backend + 'static>(worker: Worker<B>, shutdown: UnboundedSender<()>) {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut int), Ok(mut term)) = (signal(SignalKind::interrupt()), signal(SignalKind::terminate())) else {
        eprintln!("jaxrepl-kernel: cannot install signal handlers");
        return;
    };
    loop {
        tokio::select! {
            Some(()) = int.recv() => worker.interrupt(),
            Some(()) = term.recv() => { let _ = shutdown.send(()); }
            else => return,
        }
    }
}

/// Exits when the process that started the kernel dies: nothing else would notice, and
/// an orphaned kernel keeps its evaluation child alive forever (frontends.md §8.12).
async fn watch_parent(shutdown: UnboundedSender<()>) {
    let parent = std::os::unix::process::parent_id();
    if parent == 1 {
        return; // started by init (a container's entry point): no parent to outlive
    }
    loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        if std::os::unix::process::parent_id() != parent {
            eprintln!("jaxrepl-kernel: parent process {parent} is gone; exiting");
            let _ = shutdown.send(());
            return;
        }
    }
}
