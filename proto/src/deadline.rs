//! How long a call may take, and how a connection notices that its peer went silent.
//!
//! A peer that refuses connections is easy: the call fails at once. The faults that hold a cluster up are the
//! silent ones: a process stopped (SIGSTOP, a hung machine, a stalled disk under its kernel), a link that drops
//! packets instead of refusing them, a NAT that forgets an idle connection. The kernel of a stopped process
//! still completes TCP handshakes and acknowledges data, so without a bound a call to it waits forever. Two
//! bounds answer that, on every side (workers, clients and members calling each other):
//!
//! - **a deadline on every call**, chosen for what the call does ([`CallKind`]): a call that runs out of it
//!   fails with `DEADLINE_EXCEEDED` ([`within`]), which clients treat like a lost connection and move to the
//!   next member on;
//! - **HTTP/2 keepalive pings** on every connection ([`keepalive`], [`KEEPALIVE_INTERVAL`]): a connection whose
//!   ping is not answered within [`KEEPALIVE_TIMEOUT`] is closed, so the next call reconnects instead of being
//!   queued on a dead connection, and a stream (`watch`) ends instead of waiting.

use std::future::Future;
use std::time::Duration;

use tonic::transport::Endpoint;

/// How long a connection may take to be made (a packet-dropping link never answers a SYN).
pub const CONNECT: Duration = Duration::from_secs(3);

/// How long a connection may receive nothing before an HTTP/2 ping goes out on it, idle or not. Pings are a few
/// bytes; a connection that answers them costs nothing more.
pub const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(1);

/// How long a ping may go unanswered before the connection is closed as dead: a peer that went silent is
/// found within [`KEEPALIVE_INTERVAL`] + this of the last frame it sent, whatever the calls' deadlines.
pub const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(2);

/// TCP keepalive on the socket too, for the peers whose HTTP/2 stack does not ping (a load balancer between).
pub const TCP_KEEPALIVE: Duration = Duration::from_secs(10);

/// The pace any link between a worker or client and its coordinator keeps; a transfer slower than this is given
/// up and tried again.
const BYTES_PER_SECOND: u64 = 4 << 20;

/// What a call does, which decides its deadline.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CallKind {
    /// A worker's heartbeat, at `interval`: it must fail well within the lease time (four intervals), so the
    /// worker can find the leader and beat there before any lease expires.
    Heartbeat { interval: Duration },
    /// Small calls answered from the coordinator's memory or after one commit: register, lease (held up to
    /// 200 ms when there is no work), fail, job status, lists, the membership, job controls.
    Quick,
    /// A call that carries or returns `bytes` (a report of results, a shipped program, an artifact, an
    /// answer), or must plan a job (submit): a floor for the coordinator's own work, then the link's pace.
    Transfer { bytes: u64 },
}

/// The floor of a [`CallKind::Transfer`]: the coordinator checks each reported result, and a submit plans
/// its job, before they answer.
const TRANSFER_FLOOR: Duration = Duration::from_secs(30);

/// The bounds of a heartbeat's deadline, whatever its interval.
const HEARTBEAT_MIN: Duration = Duration::from_secs(2);
const HEARTBEAT_MAX: Duration = Duration::from_secs(5);

/// The deadline of a [`CallKind::Quick`] call.
pub const QUICK: Duration = Duration::from_secs(5);

impl CallKind {
    /// How long a call of this kind may take before its member is taken for unreachable.
    pub fn deadline(self) -> Duration {
        match self {
            CallKind::Heartbeat { interval } => interval.clamp(HEARTBEAT_MIN, HEARTBEAT_MAX),
            CallKind::Quick => QUICK,
            CallKind::Transfer { bytes } => {
                TRANSFER_FLOOR + Duration::from_secs(bytes / BYTES_PER_SECOND)
            }
        }
    }
}

/// `endpoint` with the connect timeout and the keepalives every connection of sweep's uses.
pub fn keepalive(endpoint: Endpoint) -> Endpoint {
    endpoint
        .connect_timeout(CONNECT)
        .http2_keep_alive_interval(KEEPALIVE_INTERVAL)
        .keep_alive_timeout(KEEPALIVE_TIMEOUT)
        .keep_alive_while_idle(true)
        .tcp_keepalive(Some(TCP_KEEPALIVE))
}

/// `call`, given `deadline` to answer: one that does not is `DEADLINE_EXCEEDED`, naming the deadline.
pub async fn within<T>(
    deadline: Duration,
    call: impl Future<Output = Result<T, tonic::Status>>,
) -> Result<T, tonic::Status> {
    match tokio::time::timeout(deadline, call).await {
        Ok(answer) => answer,
        Err(_) => Err(tonic::Status::deadline_exceeded(format!(
            "no answer within {} ms",
            deadline.as_millis()
        ))),
    }
}

/// Whether `status` says the call was lost on the way or ran out of time: the member may or may not have
/// carried it out, and may be unreachable. tonic's own timeouts (`grpc-timeout`, a channel's timeout) end a
/// call with `CANCELLED`; sweep's coordinator never answers with it.
pub fn is_lost(status: &tonic::Status) -> bool {
    matches!(
        status.code(),
        tonic::Code::Unavailable | tonic::Code::DeadlineExceeded | tonic::Code::Cancelled
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deadlines_follow_what_a_call_does() {
        // The default lease of 30 s beats every 7.5 s: a beat gives up after 5 s, well before the lease ends.
        let beat = CallKind::Heartbeat {
            interval: Duration::from_millis(7_500),
        };
        assert_eq!(beat.deadline(), Duration::from_secs(5));
        assert!(beat.deadline() * 4 < Duration::from_secs(30));
        // Short test leases beat often; the deadline keeps a floor that a loaded machine still meets.
        let fast = CallKind::Heartbeat {
            interval: Duration::from_millis(250),
        };
        assert_eq!(fast.deadline(), HEARTBEAT_MIN);
        assert_eq!(CallKind::Quick.deadline(), QUICK);
        let small = CallKind::Transfer { bytes: 1_000 };
        let big = CallKind::Transfer { bytes: 1 << 30 };
        assert_eq!(small.deadline(), TRANSFER_FLOOR);
        assert_eq!(big.deadline(), TRANSFER_FLOOR + Duration::from_secs(256));
    }

    #[tokio::test]
    async fn a_call_past_its_deadline_is_deadline_exceeded_and_lost() {
        let never = std::future::pending::<Result<(), tonic::Status>>();
        let e = within(Duration::from_millis(20), never).await.unwrap_err();
        assert_eq!(e.code(), tonic::Code::DeadlineExceeded);
        assert!(e.message().contains("20 ms"), "{e:?}");
        assert!(is_lost(&e));
        let answered = within(Duration::from_secs(5), async { Ok::<_, tonic::Status>(7) }).await;
        assert_eq!(answered.unwrap(), 7);
        // tonic's own timeout, and the usual answers.
        assert!(is_lost(&tonic::Status::cancelled("Timeout expired")));
        assert!(is_lost(&tonic::Status::unavailable("transport error")));
        assert!(!is_lost(&tonic::Status::not_found("no job 7")));
        assert!(!is_lost(&tonic::Status::permission_denied(
            "a worker token"
        )));
    }
}
