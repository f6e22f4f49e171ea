//! A worker job's answer, sent exactly once whatever the job does.

use std::fmt;
use std::panic::{AssertUnwindSafe, catch_unwind};

use crossbeam_channel::Sender;
use kiln_ml_core::{BlockIndex, FileId, ReadError};

use crate::{Error, Result};

/// What a job does, named in the error it answers when it fails unanswered. Formatted only
/// then: an epoch is tens of thousands of jobs, and most answer their own result.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Task {
    /// Reading a block of the source.
    Read {
        /// The block.
        block: BlockIndex,
        /// The block's file id in the layout.
        file: FileId,
    },
    /// Collating a batch (numbered within the whole epoch).
    Collate {
        /// The batch.
        batch: u64,
    },
}

impl fmt::Display for Task {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Read { block, file } => write!(f, "reading block {block} (file {file})"),
            Self::Collate { batch } => write!(f, "collating batch {batch}"),
        }
    }
}

/// The sending end of one job's result. The consumer waits for every job's answer, so a job
/// that answers nothing would hang the epoch: [`Reply::answer`] catches a panic anywhere in the
/// job's body (a failing source's `describe_block`, an item's `Drop` on the error path), and
/// dropping an unanswered reply (a panic past that, or a job dropped without running) sends an
/// error naming the task.
pub(crate) struct Reply<K: Copy, T> {
    sender: Option<Sender<(K, Result<T>)>>,
    key: K,
    task: Task,
}

impl<K: Copy, T> Reply<K, T> {
    /// The reply to job `key`. Create it before the job is queued, so that even a job that
    /// never runs answers.
    pub(crate) fn new(sender: Sender<(K, Result<T>)>, key: K, task: Task) -> Self {
        Self {
            sender: Some(sender),
            key,
            task,
        }
    }

    /// Answers nothing: the epoch was dropped and nobody waits for this job any more.
    pub(crate) fn abandon(mut self) {
        self.sender.take();
    }

    /// Runs the job's body and sends its result, or an error naming the task and the panic
    /// message if the body panics (its own guards included: everything it drops is dropped
    /// inside).
    pub(crate) fn answer(self, body: impl FnOnce() -> Result<T>) {
        let result = catch_unwind(AssertUnwindSafe(body))
            .unwrap_or_else(|payload| Err(Error::panicked(self.task.to_string(), payload)));
        self.send(result);
    }

    /// Sends the job's result.
    fn send(mut self, result: Result<T>) {
        if let Some(sender) = self.sender.take() {
            let _ = sender.send((self.key, result));
        }
    }
}

impl<K: Copy, T> Drop for Reply<K, T> {
    fn drop(&mut self) {
        let Some(sender) = self.sender.take() else {
            return;
        };
        let message = if std::thread::panicking() {
            "the worker panicked outside the job's guard"
        } else {
            "the job ended without a result"
        };
        let error = Error::Read(ReadError::Panicked {
            task: self.task.to_string(),
            message: message.to_owned(),
        });
        let _ = sender.send((self.key, Err(error)));
    }
}

#[cfg(test)]
mod tests {
    use std::panic::{AssertUnwindSafe, catch_unwind};

    use crossbeam_channel::unbounded;

    use super::*;

    const fn read(block: BlockIndex) -> Task {
        Task::Read { block, file: 0 }
    }

    #[test]
    fn a_reply_answers_once_whatever_the_job_does() {
        let (sender, answers) = unbounded::<(u64, Result<u32>)>();
        Reply::new(sender.clone(), 1, read(1)).answer(|| Ok(7));
        Reply::new(sender.clone(), 2, read(2)).answer(|| panic!("inside the body"));
        let unwound = catch_unwind(AssertUnwindSafe(|| {
            let _reply = Reply::<u64, u32>::new(sender.clone(), 3, read(3));
            panic!("outside the body");
        }));
        assert!(unwound.is_err());
        drop(Reply::<u64, u32>::new(sender.clone(), 4, read(4)));
        Reply::<u64, u32>::new(sender, 5, read(5)).abandon();
        let answers: Vec<_> = answers.try_iter().collect();
        assert_eq!(answers.len(), 4, "one answer per job not abandoned");
        assert_eq!(answers[0].1.as_ref().unwrap(), &7);
        let expected = [
            (2, "reading block 2 (file 0): inside the body"),
            (3, "reading block 3 (file 0): the worker panicked outside"),
            (
                4,
                "reading block 4 (file 0): the job ended without a result",
            ),
        ];
        for ((key, answer), (job, text)) in answers[1..].iter().zip(expected) {
            assert_eq!(*key, job);
            let error = answer.as_ref().unwrap_err().to_string();
            assert!(error.contains(text), "{error}");
        }
    }
}
