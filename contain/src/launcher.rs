//! The launcher: a small process that forks the boxes. A worker's address space is large (its runtime, its
//! connections, the store's cache); forking it for every chunk costs page-table copies that a trivial program's
//! whole run does not. The launcher is the `sweep` binary started again with one argument, before the worker
//! grows: it forks from a tiny address space, and passes the box's pipes back over a Unix socket.
//!
//! It ends when the worker does (its socket closes; a parent-death signal besides), and its boxes with it: each
//! box has a parent-death signal too, and a box is PID 1 of its namespace, so nothing a chunk started survives.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use serde::{Deserialize, Serialize};

use crate::spawn::{self, Started};
use crate::Spec;

/// The argument that makes the `sweep` binary a launcher.
pub const ARG: &str = "__sweep-launcher";
/// The launcher's ends of its channels are fds FIRST_FD.. (set up by [`start_global`]).
const FIRST_FD: RawFd = 3;
/// At most this many channels, however many cores.
const MAX_CHANNELS: usize = 16;
/// The largest request: a command line and environment beyond this are started without the launcher.
const MAX_REQUEST: usize = 192 * 1024;

#[derive(Serialize, Deserialize)]
struct Request {
    spec: Spec,
    procs: Vec<PathBuf>,
    /// The request carries one fd, the program's stdin (a resident box's channel).
    stdin: bool,
}

/// The kinds of start error a caller tells apart.
#[derive(Serialize, Deserialize)]
enum Kind {
    NotFound,
    PermissionDenied,
    InvalidInput,
    Unsupported,
    Other,
}

impl Kind {
    fn of(e: &io::Error) -> Kind {
        match e.kind() {
            io::ErrorKind::NotFound => Kind::NotFound,
            io::ErrorKind::PermissionDenied => Kind::PermissionDenied,
            io::ErrorKind::InvalidInput => Kind::InvalidInput,
            io::ErrorKind::Unsupported => Kind::Unsupported,
            _ => Kind::Other,
        }
    }

    fn kind(&self) -> io::ErrorKind {
        match self {
            Kind::NotFound => io::ErrorKind::NotFound,
            Kind::PermissionDenied => io::ErrorKind::PermissionDenied,
            Kind::InvalidInput => io::ErrorKind::InvalidInput,
            Kind::Unsupported => io::ErrorKind::Unsupported,
            Kind::Other => io::ErrorKind::Other,
        }
    }
}

#[derive(Serialize, Deserialize)]
enum Reply {
    Started {
        pid: i32,
        pid_namespace: bool,
    },
    Failed {
        errno: Option<i32>,
        /// The error's kind where it has no errno (a program not found in PATH is `NotFound`).
        kind: Kind,
        message: String,
    },
}

/// The worker's side of a launcher.
pub struct Launcher {
    channels: Vec<Mutex<OwnedFd>>,
    /// The binary the launcher runs: it serves this crate's arguments ([`crate::serve_if_asked`]).
    exe: PathBuf,
}

static GLOBAL: OnceLock<Launcher> = OnceLock::new();

/// Starts the process-wide launcher from `exe` (the running `sweep` binary). Call it early, from the main thread:
/// the launcher's parent-death signal follows the thread that started it.
pub fn start_global(exe: &Path) -> io::Result<()> {
    if GLOBAL.get().is_some() {
        return Ok(());
    }
    // One channel (and launcher thread) per core, so that starting one chunk never waits for another's start.
    let channels = std::thread::available_parallelism()
        .map_or(2, |n| n.get())
        .clamp(2, MAX_CHANNELS);
    let mut ours = Vec::with_capacity(channels);
    let mut theirs = Vec::with_capacity(channels);
    for _ in 0..channels {
        let (a, b) = socketpair()?;
        ours.push(Mutex::new(a));
        theirs.push(b);
    }
    let raw: Vec<RawFd> = theirs.iter().map(AsRawFd::as_raw_fd).collect();
    let mut cmd = std::process::Command::new(exe);
    cmd.arg(ARG)
        .arg(channels.to_string())
        .stdin(std::process::Stdio::null())
        .env_clear();
    // The launcher must find the same containment the worker found, or the two disagree on what enforces a limit.
    if let Some(v) = std::env::var_os(crate::facilities::CONTAINMENT_VAR) {
        cmd.env(crate::facilities::CONTAINMENT_VAR, v);
    }
    use std::os::unix::process::CommandExt;
    // SAFETY: between fork and exec only fcntl, dup2 and prctl, all async-signal-safe, on a prepared list.
    unsafe {
        cmd.pre_exec(move || {
            // Out of the way first, so that placing one at 3 + i cannot overwrite another not yet placed.
            let mut high = [0 as RawFd; MAX_CHANNELS];
            for (i, fd) in raw.iter().enumerate() {
                high[i] = libc::fcntl(*fd, libc::F_DUPFD_CLOEXEC, 64);
                if high[i] < 0 {
                    return Err(io::Error::last_os_error());
                }
            }
            for (i, fd) in high[..raw.len()].iter().enumerate() {
                if libc::dup2(*fd, FIRST_FD + i as RawFd) < 0 {
                    return Err(io::Error::last_os_error());
                }
            }
            libc::prctl(
                libc::PR_SET_PDEATHSIG,
                libc::SIGKILL as libc::c_ulong,
                0,
                0,
                0,
            );
            Ok(())
        });
    }
    let child = cmd.spawn()?;
    drop(theirs);
    tracing::debug!(pid = child.id(), channels, "launcher started");
    // The child is never waited for: it lives as long as this process.
    std::mem::forget(child);
    let _ = GLOBAL.set(Launcher {
        channels: ours,
        exe: exe.to_path_buf(),
    });
    Ok(())
}

pub(crate) fn global() -> Option<&'static Launcher> {
    GLOBAL.get()
}

impl Launcher {
    /// The binary the launcher runs, which serves this crate's arguments.
    pub(crate) fn exe(&self) -> &Path {
        &self.exe
    }

    /// Asks the launcher to start `spec`, with `stdin` as the program's stdin if given; `None` when the request is
    /// too large for it (the caller starts the box itself).
    pub(crate) fn start(
        &self,
        spec: &Spec,
        procs: &[PathBuf],
        stdin: Option<RawFd>,
    ) -> Option<io::Result<Started>> {
        let req = match serde_json::to_vec(&Request {
            spec: spec.clone(),
            procs: procs.to_vec(),
            stdin: stdin.is_some(),
        }) {
            Ok(r) if r.len() <= MAX_REQUEST => r,
            _ => return None,
        };
        // A free channel if there is one, else wait for the one this thread would use first.
        let first = thread_slot() % self.channels.len();
        let sock = (0..self.channels.len())
            .find_map(|k| {
                self.channels[(first + k) % self.channels.len()]
                    .try_lock()
                    .ok()
            })
            .unwrap_or_else(|| match self.channels[first].lock() {
                Ok(s) => s,
                Err(poisoned) => poisoned.into_inner(),
            });
        Some(Self::exchange(sock.as_raw_fd(), &req, stdin))
    }

    fn exchange(fd: RawFd, req: &[u8], stdin: Option<RawFd>) -> io::Result<Started> {
        send(fd, req, stdin.as_slice())?;
        let mut buf = vec![0u8; 64 * 1024];
        let (n, fds) = recv(fd, &mut buf)?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::BrokenPipe,
                "the launcher has gone away",
            ));
        }
        let reply: Reply = serde_json::from_slice(&buf[..n]).map_err(io::Error::other)?;
        match reply {
            Reply::Started { pid, pid_namespace } => {
                let [stdout, stderr, status, exec]: [OwnedFd; 4] =
                    fds.try_into().map_err(|_| {
                        io::Error::other("the launcher's reply did not carry four pipes")
                    })?;
                Ok(Started {
                    pid,
                    stdout,
                    stderr,
                    status,
                    exec,
                    pid_namespace,
                })
            }
            Reply::Failed {
                errno,
                kind,
                message,
            } => Err(io::Error::new(
                errno.map_or(kind.kind(), |e| io::Error::from_raw_os_error(e).kind()),
                message,
            )),
        }
    }
}

/// A small number per thread, spreading threads over the channels.
fn thread_slot() -> usize {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static SLOT: usize = NEXT.fetch_add(1, Ordering::Relaxed);
    }
    SLOT.with(|s| *s)
}

/// The launcher process: serves start requests on its channels (one thread each) until the worker closes them.
/// Never returns.
pub fn serve() -> ! {
    // SAFETY: boxes report through their status pipes, never through wait: let the kernel reap them.
    unsafe { libc::signal(libc::SIGCHLD, libc::SIG_IGN) };
    let channels: usize = std::env::args()
        .nth(2)
        .and_then(|n| n.parse().ok())
        .unwrap_or(1)
        .clamp(1, MAX_CHANNELS);
    for i in 1..channels {
        let fd = FIRST_FD + i as RawFd;
        if std::thread::Builder::new()
            .spawn(move || serve_channel(fd))
            .is_err()
        {
            std::process::exit(1);
        }
    }
    serve_channel(FIRST_FD)
}

/// Serves one channel; the whole launcher ends when any channel closes (the worker is gone).
fn serve_channel(fd: RawFd) -> ! {
    let mut buf = vec![0u8; MAX_REQUEST + 1];
    loop {
        let (n, fds) = match recv(fd, &mut buf) {
            Ok(r) => r,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        if n == 0 {
            break;
        }
        let reply = match serde_json::from_slice::<Request>(&buf[..n]) {
            Ok(req) => match (req.stdin, fds.first()) {
                (false, _) => spawn::start(&req.spec, &req.procs),
                (true, Some(input)) => {
                    spawn::start_with_stdin(&req.spec, &req.procs, Some(input.as_raw_fd()))
                }
                (true, None) => Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "a request for a program's stdin that carried no fd",
                )),
            },
            Err(e) => Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("a garbled request: {e}"),
            )),
        };
        let sent = match reply {
            Ok(s) => {
                let msg = serde_json::to_vec(&Reply::Started {
                    pid: s.pid,
                    pid_namespace: s.pid_namespace,
                })
                .unwrap_or_default();
                send(
                    fd,
                    &msg,
                    &[
                        s.stdout.as_raw_fd(),
                        s.stderr.as_raw_fd(),
                        s.status.as_raw_fd(),
                        s.exec.as_raw_fd(),
                    ],
                )
            }
            Err(e) => {
                let msg = serde_json::to_vec(&Reply::Failed {
                    errno: e.raw_os_error(),
                    kind: Kind::of(&e),
                    message: e.to_string(),
                })
                .unwrap_or_default();
                send(fd, &msg, &[])
            }
        };
        if sent.is_err() {
            break;
        }
    }
    std::process::exit(0)
}

/// A connected pair of message sockets (close-on-exec), one channel's two ends.
pub(crate) fn socketpair() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: socketpair writes two fds into the array.
    if unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    } != 0
    {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both were just created and are owned only here.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

pub(crate) fn send(fd: RawFd, data: &[u8], fds: &[RawFd]) -> io::Result<()> {
    let mut iov = libc::iovec {
        iov_base: data.as_ptr() as *mut libc::c_void,
        iov_len: data.len(),
    };
    let mut cmsg = [0u8; 64];
    // SAFETY: a msghdr over local buffers; CMSG_* compute offsets within `cmsg`, sized for up to 8 fds.
    unsafe {
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        if !fds.is_empty() {
            let len = std::mem::size_of_val(fds) as u32;
            msg.msg_control = cmsg.as_mut_ptr().cast();
            msg.msg_controllen = libc::CMSG_SPACE(len) as _;
            let c = libc::CMSG_FIRSTHDR(&msg);
            (*c).cmsg_level = libc::SOL_SOCKET;
            (*c).cmsg_type = libc::SCM_RIGHTS;
            (*c).cmsg_len = libc::CMSG_LEN(len) as _;
            std::ptr::copy_nonoverlapping(fds.as_ptr(), libc::CMSG_DATA(c).cast(), fds.len());
        }
        loop {
            if libc::sendmsg(fd, &msg, libc::MSG_NOSIGNAL) >= 0 {
                return Ok(());
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
    }
}

pub(crate) fn recv(fd: RawFd, buf: &mut [u8]) -> io::Result<(usize, Vec<OwnedFd>)> {
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    let mut cmsg = [0u8; 64];
    // SAFETY: as in `send`; received fds are taken into OwnedFds exactly once.
    unsafe {
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = cmsg.as_mut_ptr().cast();
        msg.msg_controllen = cmsg.len() as _;
        let n = libc::recvmsg(fd, &mut msg, libc::MSG_CMSG_CLOEXEC);
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        let mut fds = Vec::new();
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                let count = ((*c).cmsg_len as usize - libc::CMSG_LEN(0) as usize)
                    / std::mem::size_of::<RawFd>();
                let data = libc::CMSG_DATA(c).cast::<RawFd>();
                for i in 0..count {
                    fds.push(OwnedFd::from_raw_fd(std::ptr::read_unaligned(data.add(i))));
                }
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
        if msg.msg_flags & libc::MSG_TRUNC != 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "a message larger than the launcher takes",
            ));
        }
        Ok((n as usize, fds))
    }
}
