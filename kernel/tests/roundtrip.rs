//! Round trip through the real binary, with jupyter-zmq-client as the client: no Python.
//!
//! Starts `jaxrepl-kernel` on a fresh connection file (prelude off, so only evcxr is
//! needed), checks the heartbeat, `iopub_welcome`, `kernel_info`, that `1 + 2` gives the
//! `execute_result` "3" between busy and idle, and that `shutdown_request` ends the process.

use jupyter_protocol::{
    ConnectionInfo, ExecuteRequest, JupyterMessage, JupyterMessageContent as C, KernelInfoRequest,
    MediaType, ReplyStatus, ShutdownRequest, Transport,
};
use jupyter_zmq_client::{
    ClientIoPubConnection, create_client_control_connection, create_client_heartbeat_connection,
    create_client_iopub_connection, create_client_shell_connection_with_identity, peek_ports,
    peer_identity_for_session, wait_for_iopub_welcome,
};
use std::process::{Child, Command};
use std::time::Duration;
use tokio::time::timeout;

/// The first cell starts an evcxr context (seconds; minutes on a loaded 2-core machine).
const FIRST_CELL: Duration = Duration::from_secs(600);
const REPLY: Duration = Duration::from_secs(20);

/// Kills the kernel if the test fails before shutting it down.
struct KernelProcess(Child);

impl Drop for KernelProcess {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

async fn start_kernel(dir: &std::path::Path) -> (KernelProcess, ConnectionInfo) {
    let ip = "127.0.0.1";
    let ports = peek_ports(ip.parse().unwrap(), 5).await.unwrap();
    let info = ConnectionInfo {
        ip: ip.into(),
        transport: Transport::TCP,
        shell_port: ports[0],
        iopub_port: ports[1],
        stdin_port: ports[2],
        control_port: ports[3],
        hb_port: ports[4],
        key: uuid::Uuid::new_v4().to_string(),
        signature_scheme: "hmac-sha256".into(),
        kernel_name: Some("jaxrepl".into()),
    };
    let file = dir.join("connection.json");
    std::fs::write(&file, serde_json::to_string(&info).unwrap()).unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_jaxrepl-kernel"))
        .arg("--connection-file")
        .arg(&file)
        .env("JAXREPL_NO_PRELUDE", "1")
        .spawn()
        .expect("starting jaxrepl-kernel");
    (KernelProcess(child), info)
}

/// Reads iopub until the idle status of `parent`; returns that request's messages.
/// A build/compile progress display (`display_data`/`update_display_data` whose transient
/// display id starts `jaxrepl-progress-`) or the `clear_output` that removes finished ones.
fn is_progress(m: &JupyterMessage) -> bool {
    let progress_id = |t: Option<&str>| t.is_some_and(|id| id.starts_with("jaxrepl-progress-"));
    match &m.content {
        C::ClearOutput(_) => true,
        C::DisplayData(d) => progress_id(d.transient.as_ref().and_then(|t| t.display_id.as_deref())),
        C::UpdateDisplayData(d) => progress_id(d.transient.display_id.as_deref()),
        _ => false,
    }
}

async fn until_idle(iopub: &mut ClientIoPubConnection, parent: &JupyterMessage, limit: Duration) -> Vec<JupyterMessage> {
    let mut seen = vec![];
    loop {
        let msg = timeout(limit, iopub.read()).await.expect("iopub timed out").expect("iopub read");
        if msg.parent_header.as_ref().map(|h| &h.msg_id) != Some(&parent.header.msg_id) {
            continue;
        }
        let idle = matches!(&msg.content, C::Status(s) if s.execution_state.as_str() == "idle");
        seen.push(msg);
        if idle {
            return seen;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn execute_one_plus_two_then_shut_down() {
    let dir = std::env::temp_dir().join(format!("jaxrepl-kernel-roundtrip-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (mut kernel, info) = start_kernel(&dir).await;
    tokio::time::sleep(Duration::from_millis(300)).await; // let it bind

    let session = uuid::Uuid::new_v4().to_string();
    let mut iopub = create_client_iopub_connection(&info, "", &session).await.unwrap();
    let welcome = wait_for_iopub_welcome(&mut iopub, Duration::from_secs(10)).await.unwrap();
    assert_eq!(welcome.as_deref(), Some(""), "iopub_welcome for the empty subscription");
    let identity = peer_identity_for_session(&session).unwrap();
    let mut shell = create_client_shell_connection_with_identity(&info, &session, identity).await.unwrap();
    let mut control = create_client_control_connection(&info, &session).await.unwrap();
    let mut hb = create_client_heartbeat_connection(&info).await.unwrap();
    timeout(REPLY, hb.single_heartbeat()).await.expect("heartbeat timed out").unwrap();

    let request: JupyterMessage = KernelInfoRequest {}.into();
    shell.send(request.clone()).await.unwrap();
    let reply = timeout(REPLY, shell.read()).await.unwrap().unwrap();
    let C::KernelInfoReply(info_reply) = &reply.content else { panic!("{:?}", reply.content) };
    assert_eq!(info_reply.language_info.name, "rust");
    assert_eq!(info_reply.language_info.file_extension.as_deref(), Some(".rs"));
    until_idle(&mut iopub, &request, REPLY).await;

    let request: JupyterMessage = ExecuteRequest::new("1 + 2".into()).into();
    shell.send(request.clone()).await.unwrap();
    let reply = timeout(FIRST_CELL, shell.read()).await.expect("execute timed out").unwrap();
    let C::ExecuteReply(exec_reply) = &reply.content else { panic!("{:?}", reply.content) };
    assert_eq!(exec_reply.status, ReplyStatus::Ok, "{exec_reply:?}");
    assert_eq!(exec_reply.execution_count.value(), 1);
    let messages = until_idle(&mut iopub, &request, REPLY).await;
    // A first cell that takes over a second to build shows a progress display, cleared away
    // before the result (docs/engine-api.md, progress displays); the cell's own messages are the rest, in order.
    let messages: Vec<JupyterMessage> = messages.into_iter().filter(|m| !is_progress(m)).collect();
    let kinds: Vec<&str> = messages.iter().map(|m| m.header.msg_type.as_str()).collect();
    assert_eq!(kinds, ["status", "execute_input", "execute_result", "status"]);
    let C::ExecuteResult(result) = &messages[2].content else { unreachable!() };
    assert!(
        result.data.content.iter().any(|m| matches!(m, MediaType::Plain(t) if t == "3")),
        "{:?}",
        result.data
    );

    let request: JupyterMessage = ShutdownRequest { restart: false }.into();
    control.send(request).await.unwrap();
    let reply = timeout(REPLY, control.read()).await.unwrap().unwrap();
    let C::ShutdownReply(shutdown) = &reply.content else { panic!("{:?}", reply.content) };
    assert_eq!(shutdown.status, ReplyStatus::Ok);
    let mut exited = None;
    for _ in 0..100 {
        if let Some(status) = kernel.0.try_wait().unwrap() {
            exited = Some(status);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(exited.expect("the kernel did not exit within 10 s").success());
    let _ = std::fs::remove_dir_all(&dir);
}
