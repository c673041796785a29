//! `durable-streams aws …`: where failures land in an AWS deployment, for
//! the operator (the library: `ds-dead-letters`). Queue URLs and the re-run
//! target come from flags or the environment; the stack's outputs name
//! them (README, "Deploy to AWS"). Also the one-off migration of a table to
//! the path index (`index-paths`, `ds_store_aws::index::backfill`).

use anyhow::{bail, Context};
use ds_dead_letters::{DeadLetterQueues, QueueRole, Redriven, RerunTarget};

#[derive(clap::Args, Debug)]
pub struct AwsArgs {
    /// TaskDeadLetterQueueUrl of the stack.
    #[arg(long, env = "DS_AWS_TASK_DEAD_LETTER_QUEUE_URL", global = true)]
    task_dead_letter_queue_url: Option<String>,
    /// FailedInvocationsQueueUrl of the stack.
    #[arg(long, env = "DS_AWS_FAILED_INVOCATIONS_QUEUE_URL", global = true)]
    failed_invocations_queue_url: Option<String>,
    /// ScheduleDeadLetterQueueUrl of the stack.
    #[arg(long, env = "DS_AWS_SCHEDULE_DEAD_LETTER_QUEUE_URL", global = true)]
    schedule_dead_letter_queue_url: Option<String>,
    /// ParkedRecordsQueueUrl of the stack.
    #[arg(long, env = "DS_PROCESSOR_PARKED_QUEUE_URL", global = true)]
    parked_queue_url: Option<String>,
    /// TaskQueueUrl of the stack: where redriven tasks go back to.
    #[arg(long, env = "DS_PROCESSOR_TASK_QUEUE_URL", global = true)]
    task_queue_url: Option<String>,
    /// The schedule group re-runs are scheduled in (RevivalScheduleGroup).
    #[arg(long, env = "DS_PROCESSOR_SCHEDULE_GROUP", global = true)]
    schedule_group: Option<String>,
    /// The role Scheduler invokes the functions as (SchedulerInvokeRoleArn).
    #[arg(long, env = "DS_AWS_SCHEDULER_ROLE_ARN", global = true)]
    scheduler_role_arn: Option<String>,
    /// ScheduleDeadLetterQueueArn: where an undeliverable re-run goes.
    #[arg(long, env = "DS_AWS_SCHEDULE_DEAD_LETTER_ARN", global = true)]
    schedule_dead_letter_arn: Option<String>,
    /// ProcessorFunctionArn: where a parked record is re-run.
    #[arg(long, env = "DS_PROCESSOR_FUNCTION_ARN", global = true)]
    processor_function_arn: Option<String>,
    #[command(subcommand)]
    command: AwsCommand,
}

#[derive(clap::Subcommand, Debug)]
enum AwsCommand {
    /// What sits in each dead-letter, parked-record and failed-invocation queue, with the reason.
    DeadLetters {
        /// Only this queue: tasks, failed-invocations, schedules or parked.
        #[arg(long, value_parser = parse_queue)]
        queue: Option<QueueRole>,
    },
    /// Redrive a queue: tasks go back to the task queue; failed invocations,
    /// undelivered schedules and parked records are re-run. Idempotent.
    Redrive {
        /// The queue: tasks, failed-invocations, schedules or parked.
        #[arg(long, value_parser = parse_queue)]
        queue: QueueRole,
        /// Only this message (an id `dead-letters` printed).
        #[arg(long)]
        message_id: Option<String>,
    },
    /// Index every stream of the table for listing (the path index): once,
    /// on a table written by a version without it. Streams it has not
    /// indexed are missing from GET /v1/processors and from a new
    /// subscription's backfill. Idempotent; safe while the service runs.
    /// The table comes from DS_AWS_TABLE (and the AWS_* environment).
    IndexPaths,
}

fn parse_queue(s: &str) -> Result<QueueRole, String> {
    QueueRole::parse(s).ok_or_else(|| {
        let names: Vec<&str> = QueueRole::ALL.iter().map(|r| r.name()).collect();
        format!("one of {}", names.join(", "))
    })
}

impl AwsArgs {
    async fn queues(&self) -> DeadLetterQueues {
        let conf = aws_config::defaults(aws_config::BehaviorVersion::latest()).load().await;
        let urls = [
            (QueueRole::TaskDeadLetters, &self.task_dead_letter_queue_url),
            (QueueRole::FailedInvocations, &self.failed_invocations_queue_url),
            (QueueRole::ScheduleDeadLetters, &self.schedule_dead_letter_queue_url),
            (QueueRole::ParkedRecords, &self.parked_queue_url),
        ];
        let rerun = match (
            &self.schedule_group,
            &self.scheduler_role_arn,
            &self.schedule_dead_letter_arn,
            &self.processor_function_arn,
        ) {
            (Some(group), Some(role), Some(dlq), Some(function)) => Some(RerunTarget {
                schedule_group: group.clone(),
                role_arn: role.clone(),
                dead_letter_arn: dlq.clone(),
                processor_function_arn: function.clone(),
            }),
            _ => None,
        };
        DeadLetterQueues {
            sqs: aws_sdk_sqs::Client::new(&conf),
            scheduler: aws_sdk_scheduler::Client::new(&conf),
            urls: urls.into_iter().filter_map(|(role, url)| Some((role, url.clone()?))).collect(),
            task_queue_url: self.task_queue_url.clone(),
            rerun,
            clock: ds_dead_letters::Clock::system(),
        }
    }
}

pub async fn run(args: AwsArgs) -> anyhow::Result<()> {
    if let AwsCommand::IndexPaths = &args.command {
        let aws = ds_store_aws::AwsSubstrate::from_env().await.context("configuring the AWS substrate")?;
        let report = aws.backfill_path_index().await.context("indexing the table's streams")?;
        println!("{}: {} stream(s) indexed", aws.config().table, report.written);
        return Ok(());
    }
    let queues = args.queues().await;
    match &args.command {
        AwsCommand::DeadLetters { queue } => {
            let roles: Vec<QueueRole> = match queue {
                Some(q) => vec![*q],
                None => QueueRole::ALL.into_iter().filter(|r| queues.urls.contains_key(r)).collect(),
            };
            if roles.is_empty() {
                bail!("no queue URL configured (see --help: the stack's outputs name them)");
            }
            for role in roles {
                let letters = queues.list(role).await.with_context(|| format!("listing {role}"))?;
                println!("{role}: {} message(s)", letters.len());
                for l in letters {
                    println!("  {}  {}  {}", l.message_id, l.letter.concerns(), l.letter.reason());
                }
            }
        }
        // Answered above, before any queue is configured.
        AwsCommand::IndexPaths => {}
        AwsCommand::Redrive { queue, message_id } => {
            let done =
                queues.redrive(*queue, message_id.as_deref()).await.with_context(|| format!("redriving {queue}"))?;
            let mut left = 0;
            for (letter, outcome) in &done {
                let what = match outcome {
                    Redriven::Requeued => "sent back to the task queue".to_owned(),
                    Redriven::Rerun { schedule } => format!("re-run by schedule {schedule}"),
                    Redriven::Left(why) => {
                        left += 1;
                        format!("left in the queue: {why}")
                    }
                };
                println!("  {}  {}  {what}", letter.message_id, letter.letter.concerns());
            }
            println!("{queue}: {} redriven, {left} left", done.len() - left);
        }
    }
    Ok(())
}
