//! Telling a stack overflow from other crashes in the REPL's evaluation child.
//!
//! Rust's runtime reports a stack overflow (`thread 'main' has overflowed its stack`) from
//! a SIGSEGV handler running on an alternate signal stack. evcxr's evaluation child
//! replaces that handler with its own (installed with `signal`, without an alternate
//! stack), which cannot run on the exhausted stack: the kernel kills the child with a bare
//! SIGSEGV and the session could only say "signal 11".
//!
//! [`install`] (called by `jax::interactive::init_session`, after evcxr's handler) puts a
//! SIGSEGV handler on an alternate stack in front of it. A fault at an address within
//! 1 MiB of the faulting stack pointer (x86_64), or at the growth limit of the main
//! thread's stack (whose bounds are recorded when installing), is a stack overflow: the
//! handler writes [`MARKER`] and a newline to stderr and lets the signal kill the process
//! as before (the session reads the marker and reports a stack overflow). Any other fault
//! goes to the previous handler unchanged (evcxr prints "Segmentation fault." and a
//! backtrace). The handler only reads values set before it was installed and calls
//! async-signal-safe functions (`write`, `sigaction`).

use std::sync::OnceLock;

/// The line the handler writes to stderr before the child dies of a stack overflow (the
/// session matches it: repl/src/session/exec.rs repeats the literal).
pub const MARKER: &str = "\x1ejaxrepl-stack-overflow";

/// Window around a recorded or faulting stack bound in which a fault counts as an overflow.
const WINDOW: usize = 1 << 20;

struct Installed {
    previous: libc::sigaction,
    /// The main thread's lowest stack address (its growth limit), when known.
    main_low: Option<usize>,
}

// SAFETY: plain data (the previous action's handler address and flags), written once.
unsafe impl Send for Installed {}
unsafe impl Sync for Installed {}

static INSTALLED: OnceLock<Installed> = OnceLock::new();

/// Installs the stack-overflow report for this process (idempotent). Call it on the main
/// thread (its stack bounds are recorded). Unix only; elsewhere it does nothing.
/// Errors: `sigaltstack` or `sigaction` failed (the process keeps its previous handler).
pub fn install() -> std::io::Result<()> {
    if INSTALLED.get().is_some() {
        return Ok(());
    }
    // SAFETY: libc calls with valid, initialised arguments; the alternate stack is leaked
    // so it outlives the thread's use of it.
    unsafe {
        let mut old_stack: libc::stack_t = std::mem::zeroed();
        if libc::sigaltstack(std::ptr::null(), &mut old_stack) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        if old_stack.ss_flags & libc::SS_DISABLE != 0 {
            let size = libc::SIGSTKSZ.max(64 * 1024);
            let memory: &'static mut [u8] = Box::leak(vec![0u8; size].into_boxed_slice());
            let stack = libc::stack_t { ss_sp: memory.as_mut_ptr().cast(), ss_flags: 0, ss_size: size };
            if libc::sigaltstack(&stack, std::ptr::null_mut()) != 0 {
                return Err(std::io::Error::last_os_error());
            }
        }
        let main_low = main_stack_low();
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = handler as extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) as usize;
        action.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
        libc::sigemptyset(&mut action.sa_mask);
        let mut previous: libc::sigaction = std::mem::zeroed();
        // Everything the handler reads is recorded before it is installed.
        if libc::sigaction(libc::SIGSEGV, std::ptr::null(), &mut previous) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        if INSTALLED.set(Installed { previous, main_low }).is_err() {
            return Ok(());
        }
        if libc::sigaction(libc::SIGSEGV, &action, std::ptr::null_mut()) != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// The lowest address of the calling thread's stack when it is the process's main thread.
fn main_stack_low() -> Option<usize> {
    // SAFETY: getpid/gettid have no preconditions; pthread_getattr_np fills `attr`, which
    // is destroyed after use.
    unsafe {
        if libc::getpid() != libc::gettid() {
            return None;
        }
        let mut attr: libc::pthread_attr_t = std::mem::zeroed();
        if libc::pthread_getattr_np(libc::pthread_self(), &mut attr) != 0 {
            return None;
        }
        let mut addr: *mut libc::c_void = std::ptr::null_mut();
        let mut size: libc::size_t = 0;
        let ok = libc::pthread_attr_getstack(&attr, &mut addr, &mut size) == 0;
        libc::pthread_attr_destroy(&mut attr);
        (ok && !addr.is_null()).then_some(addr as usize)
    }
}

/// Whether a fault at `addr` (stack pointer `sp` when known) is a stack overflow.
fn is_overflow(addr: usize, sp: Option<usize>, main_low: Option<usize>) -> bool {
    let near = |bound: usize| addr >= bound.saturating_sub(WINDOW) && addr < bound.saturating_add(WINDOW);
    let below_sp = sp.is_some_and(|sp| addr <= sp.saturating_add(4096) && addr >= sp.saturating_sub(WINDOW));
    main_low.is_some_and(near) || below_sp
}

/// The stack pointer at the fault, from the signal's machine context.
#[cfg(target_arch = "x86_64")]
unsafe fn fault_sp(context: *mut libc::c_void) -> Option<usize> {
    if context.is_null() {
        return None;
    }
    // SAFETY: the kernel passes a ucontext_t to an SA_SIGINFO handler.
    let uc = unsafe { &*(context as *const libc::ucontext_t) };
    Some(uc.uc_mcontext.gregs[libc::REG_RSP as usize] as usize)
}

#[cfg(not(target_arch = "x86_64"))]
unsafe fn fault_sp(_context: *mut libc::c_void) -> Option<usize> {
    None
}

extern "C" fn handler(signal: libc::c_int, info: *mut libc::siginfo_t, context: *mut libc::c_void) {
    let Some(installed) = INSTALLED.get() else { return };
    // SAFETY: `info` and `context` come from the kernel for an SA_SIGINFO handler; only
    // async-signal-safe calls follow.
    unsafe {
        let addr = if info.is_null() { 0 } else { (*info).si_addr() as usize };
        if is_overflow(addr, fault_sp(context), installed.main_low) {
            let line = marker_line();
            libc::write(2, line.as_ptr().cast(), line.len());
            let mut default: libc::sigaction = std::mem::zeroed();
            default.sa_sigaction = libc::SIG_DFL;
            libc::sigaction(signal, &default, std::ptr::null_mut());
        } else {
            libc::sigaction(signal, &installed.previous, std::ptr::null_mut());
        }
    }
    // Returning runs the faulting instruction again, now under the default or previous
    // action.
}

/// `MARKER` and a newline, without allocating.
fn marker_line() -> &'static [u8] {
    const LINE: &str = "\x1ejaxrepl-stack-overflow\n";
    const _: () = assert!(LINE.len() == MARKER.len() + 1);
    LINE.as_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn faults_near_the_stack_limit_or_below_the_stack_pointer_are_overflows() {
        let low = 0x7f00_0000_0000usize;
        assert!(is_overflow(low - 4096, None, Some(low)));
        assert!(is_overflow(low + 100, None, Some(low)));
        assert!(!is_overflow(16, None, Some(low)), "a null-pointer read is not");
        let sp = 0x7e00_0000_0000usize;
        assert!(is_overflow(sp - 8192, Some(sp), None));
        assert!(!is_overflow(sp + (1 << 16), Some(sp), None));
        assert!(!is_overflow(sp - (8 << 20), Some(sp), None));
        assert!(!is_overflow(0, Some(sp), Some(low)));
    }
}
