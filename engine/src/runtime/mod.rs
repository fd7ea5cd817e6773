//! The runtime: host buffers, asynchronous dispatch on a device worker, the interrupt
//! flag, host callbacks and memory accounting.

pub mod buffer;
pub mod callbacks;
pub mod collectives;
pub mod dispatch;
pub mod interrupt;
pub mod memory;
pub mod memory_kind;
pub mod stack_overflow;
pub mod quiet_panic;

pub use buffer::Buffer;
pub use dispatch::{barrier, DeviceArray, Placement};
pub use memory_kind::{Memory, MemoryKind};
