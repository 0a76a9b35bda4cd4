//! Containers that appear in a pod after the pod itself, seen the moment the runtime makes
//! their cgroup: an inotify watch on each managed pod's group.
//!
//! The API server says a container exists only once the kubelet has reported its status,
//! hundreds of milliseconds to seconds after the runtime created its group and started it;
//! an offline container would run unmanaged meanwhile, on training's cores. The runtime (or
//! systemd for it) creates the group with mkdir(2), which notifies IN_CREATE on the pod's
//! directory like on any other file system, cgroupfs included.

use std::{
    collections::{BTreeSet, HashMap},
    ffi::CString,
    io,
    os::{
        fd::{AsRawFd as _, FromRawFd as _, OwnedFd, RawFd},
        unix::ffi::OsStrExt as _,
    },
    path::{Path, PathBuf},
    sync::mpsc as std_mpsc,
    time::Duration,
};

use tokio::sync::mpsc;

/// A change among a watched pod's child groups.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GroupEvent {
    /// A child group appeared: a container (or a sandbox) was created.
    Created { pod_dir: PathBuf, child: String },
    /// A child group went away.
    Removed { pod_dir: PathBuf, child: String },
    /// The pod's own group went away; its watch is gone with it.
    PodGone { pod_dir: PathBuf },
}

/// The inotify instance watching every managed pod's group.
pub struct ContainerWatch {
    fd: OwnedFd,
    by_descriptor: HashMap<i32, PathBuf>,
    by_dir: HashMap<PathBuf, i32>,
}

const WATCHED: u32 = libc::IN_CREATE | libc::IN_DELETE | libc::IN_DELETE_SELF | libc::IN_ONLYDIR;

impl ContainerWatch {
    pub fn new() -> io::Result<Self> {
        // SAFETY: no pointers; the descriptor is owned from here on.
        let fd = unsafe { libc::inotify_init1(libc::IN_NONBLOCK | libc::IN_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Self {
            // SAFETY: a fresh descriptor nothing else owns.
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
            by_descriptor: HashMap::new(),
            by_dir: HashMap::new(),
        })
    }

    /// For a poll loop or tokio's AsyncFd: readable when events wait.
    pub fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// Watches `pod_dir` and returns the child groups it already has. The watch is in place
    /// before the directory is listed, so a container created in between is seen at least
    /// once (listed, and maybe also as an event: callers take a container twice as once).
    pub fn watch(&mut self, pod_dir: &Path) -> io::Result<Vec<String>> {
        if !self.by_dir.contains_key(pod_dir) {
            let path = CString::new(pod_dir.as_os_str().as_bytes())
                .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in a path"))?;
            // SAFETY: a valid C string; the kernel copies it.
            let wd =
                unsafe { libc::inotify_add_watch(self.fd.as_raw_fd(), path.as_ptr(), WATCHED) };
            if wd < 0 {
                let err = io::Error::last_os_error();
                return Err(io::Error::new(
                    err.kind(),
                    format!("watching {}: {err}", pod_dir.display()),
                ));
            }
            self.by_descriptor.insert(wd, pod_dir.to_owned());
            self.by_dir.insert(pod_dir.to_owned(), wd);
        }
        let mut children = Vec::new();
        for entry in std::fs::read_dir(pod_dir)? {
            let entry = entry?;
            if entry.file_type()?.is_dir() {
                children.push(entry.file_name().to_string_lossy().into_owned());
            }
        }
        children.sort();
        Ok(children)
    }

    /// Stops watching `pod_dir` (its pod is no longer managed).
    pub fn unwatch(&mut self, pod_dir: &Path) {
        if let Some(wd) = self.by_dir.remove(pod_dir) {
            self.by_descriptor.remove(&wd);
            // SAFETY: no pointers. A watch the kernel already dropped (the directory removed)
            // answers EINVAL, which changes nothing.
            unsafe { libc::inotify_rm_watch(self.fd.as_raw_fd(), wd) };
        }
    }

    pub fn watched(&self) -> usize {
        self.by_dir.len()
    }

    /// The events waiting now, without blocking.
    pub fn read_events(&mut self) -> io::Result<Vec<GroupEvent>> {
        let mut events = Vec::new();
        // Room for many events at once; each is a header and a NUL-padded name.
        let mut buffer = vec![0u8; 64 * 1024];
        loop {
            // SAFETY: the buffer is valid for its length.
            let read = unsafe {
                libc::read(
                    self.fd.as_raw_fd(),
                    buffer.as_mut_ptr().cast(),
                    buffer.len(),
                )
            };
            if read < 0 {
                let err = io::Error::last_os_error();
                if err.kind() == io::ErrorKind::WouldBlock {
                    return Ok(events);
                }
                return Err(err);
            }
            if read == 0 {
                return Ok(events);
            }
            self.parse(&buffer[..read as usize], &mut events);
        }
    }

    /// Waits up to `timeout` for events, and returns them (none at the timeout).
    pub fn wait(&mut self, timeout: Duration) -> io::Result<Vec<GroupEvent>> {
        let mut poll = libc::pollfd {
            fd: self.fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let millis = timeout.as_millis().min(i32::MAX as u128) as i32;
        // SAFETY: one valid pollfd.
        let ready = unsafe { libc::poll(&mut poll, 1, millis) };
        if ready < 0 {
            let err = io::Error::last_os_error();
            if err.kind() == io::ErrorKind::Interrupted {
                return Ok(Vec::new());
            }
            return Err(err);
        }
        self.read_events()
    }

    fn parse(&mut self, mut bytes: &[u8], events: &mut Vec<GroupEvent>) {
        const HEADER: usize = std::mem::size_of::<libc::inotify_event>();
        while bytes.len() >= HEADER {
            // SAFETY: at least a header's bytes; read unaligned, the buffer is a byte array.
            let header: libc::inotify_event =
                unsafe { std::ptr::read_unaligned(bytes.as_ptr().cast()) };
            let end = HEADER + header.len as usize;
            if bytes.len() < end {
                break;
            }
            let name = &bytes[HEADER..end];
            let name = name.split(|b| *b == 0).next().unwrap_or_default();
            let child = String::from_utf8_lossy(name).into_owned();
            bytes = &bytes[end..];
            let Some(pod_dir) = self.by_descriptor.get(&header.wd).cloned() else {
                continue;
            };
            let is_dir = header.mask & libc::IN_ISDIR != 0;
            if header.mask & libc::IN_CREATE != 0 && is_dir {
                events.push(GroupEvent::Created { pod_dir, child });
            } else if header.mask & libc::IN_DELETE != 0 && is_dir {
                events.push(GroupEvent::Removed { pod_dir, child });
            } else if header.mask & (libc::IN_DELETE_SELF | libc::IN_IGNORED) != 0 {
                // The kernel drops the watch with the directory.
                self.by_descriptor.remove(&header.wd);
                if self.by_dir.remove(&pod_dir).is_some() {
                    events.push(GroupEvent::PodGone { pod_dir });
                }
            }
        }
    }
}

/// What the watching thread is asked to do.
pub enum WatchCommand {
    Watch(PathBuf),
    Unwatch(PathBuf),
}

/// How often the watching thread looks at its commands, and retries pods whose group is not
/// there yet: the API server may report a pod before the kubelet has made its group.
const COMMAND_PERIOD: Duration = Duration::from_millis(20);

/// The inotify watch on a thread of its own (it blocks in poll): pod groups to watch go in,
/// group events come out. A pod group that does not exist yet is retried every
/// `COMMAND_PERIOD` until it does or is unwatched. With `report_existing`, the child groups
/// a pod's group already has when its watch starts come out as `Created`, so that a consumer
/// sees every container once whichever came first, the pod on the API or its group.
pub fn spawn(
    report_existing: bool,
) -> io::Result<(
    std_mpsc::Sender<WatchCommand>,
    mpsc::UnboundedReceiver<GroupEvent>,
)> {
    let mut watch = ContainerWatch::new()?;
    let (commands, command_receiver) = std_mpsc::channel();
    let (events, event_receiver) = mpsc::unbounded_channel();
    std::thread::Builder::new()
        .name("reamer-pod-groups".to_owned())
        .spawn(move || {
            let mut pending: BTreeSet<PathBuf> = BTreeSet::new();
            loop {
                loop {
                    match command_receiver.try_recv() {
                        Ok(WatchCommand::Watch(dir)) => {
                            pending.insert(dir);
                        }
                        Ok(WatchCommand::Unwatch(dir)) => {
                            pending.remove(&dir);
                            watch.unwatch(&dir);
                        }
                        Err(std_mpsc::TryRecvError::Empty) => break,
                        Err(std_mpsc::TryRecvError::Disconnected) => return,
                    }
                }
                let mut started = Vec::new();
                for dir in &pending {
                    // Not there yet: tried again next period.
                    if let Ok(children) = watch.watch(dir) {
                        started.push(dir.clone());
                        if report_existing {
                            for child in children {
                                let event = GroupEvent::Created {
                                    pod_dir: dir.clone(),
                                    child,
                                };
                                if events.send(event).is_err() {
                                    return;
                                }
                            }
                        }
                    }
                }
                for dir in started {
                    pending.remove(&dir);
                }
                match watch.wait(COMMAND_PERIOD) {
                    Ok(found) => {
                        for event in found {
                            if events.send(event).is_err() {
                                return;
                            }
                        }
                    }
                    Err(_) => std::thread::sleep(COMMAND_PERIOD),
                }
            }
        })?;
    Ok((commands, event_receiver))
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;

    #[test]
    fn groups_made_and_removed_under_a_watched_pod_are_seen_at_once() {
        let root = std::env::temp_dir().join(format!("reamer-watch-{}", std::process::id()));
        let pod = root.join("kubepods-pod1.slice");
        std::fs::create_dir_all(pod.join("crio-aa.scope")).unwrap();
        let mut watch = ContainerWatch::new().unwrap();
        assert_eq!(watch.watch(&pod).unwrap(), ["crio-aa.scope"]);
        // A file is not a container.
        std::fs::write(pod.join("cpu.weight"), "100").unwrap();
        let made = Instant::now();
        std::fs::create_dir(pod.join("crio-bb.scope")).unwrap();
        let events = watch.wait(Duration::from_secs(5)).unwrap();
        assert!(made.elapsed() < Duration::from_secs(1));
        assert_eq!(
            events,
            [GroupEvent::Created {
                pod_dir: pod.clone(),
                child: "crio-bb.scope".to_owned()
            }]
        );
        std::fs::remove_dir(pod.join("crio-bb.scope")).unwrap();
        assert_eq!(
            watch.wait(Duration::from_secs(5)).unwrap(),
            [GroupEvent::Removed {
                pod_dir: pod.clone(),
                child: "crio-bb.scope".to_owned()
            }]
        );
        std::fs::remove_dir_all(&pod).unwrap();
        let mut gone = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(5);
        while !gone.contains(&GroupEvent::PodGone {
            pod_dir: pod.clone(),
        }) && Instant::now() < deadline
        {
            gone.extend(watch.wait(Duration::from_millis(200)).unwrap());
        }
        assert!(
            gone.contains(&GroupEvent::PodGone {
                pod_dir: pod.clone()
            }),
            "{gone:?}"
        );
        assert_eq!(watch.watched(), 0);
        assert!(watch.wait(Duration::from_millis(50)).unwrap().is_empty());
        std::fs::remove_dir_all(&root).unwrap();
    }
}
