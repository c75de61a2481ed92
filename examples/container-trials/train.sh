#!/bin/sh
# A trial with no Python: a fake training loop in POSIX sh and awk (busybox's in the trial-shell image).
#
#   train.sh --lr 0.2 [--epochs 6] [--sleep 1]        (also --lr=0.2, ...)
#
# Each epoch sleeps, then prints one line in Katib's name=value form, e.g. `epoch=3 loss=0.6667`. The loss is
# (1 + 100 * (lr - 0.1)^2) / epoch: it falls with each epoch and depends on lr alone, lowest at lr 0.1, so a
# scheduler's decisions on these lines are the same on every run. --epochs 0 prints no metric line at all.
# SIGTERM (a stop: the trial's pod deleted) ends it at once, although as a container's PID 1 a shell ignores it.
set -eu

lr=0.1
epochs=6
sleep_s=1
while [ $# -gt 0 ]; do
    case "$1" in
        --lr=*) lr=${1#*=} ;;
        --epochs=*) epochs=${1#*=} ;;
        --sleep=*) sleep_s=${1#*=} ;;
        --lr | --epochs | --sleep)
            [ $# -ge 2 ] || { echo "train.sh: $1 needs a value" >&2; exit 2; }
            case "$1" in
                --lr) lr=$2 ;;
                --epochs) epochs=$2 ;;
                --sleep) sleep_s=$2 ;;
            esac
            shift
            ;;
        *) echo "train.sh: unknown argument $1" >&2; exit 2 ;;
    esac
    shift
done

trap 'exit 143' TERM
echo "training with lr $lr for $epochs epochs"  # a line with no metric in it
epoch=1
while [ "$epoch" -le "$epochs" ]; do
    sleep "$sleep_s" &
    wait $!  # a wait, not a foreground sleep, so SIGTERM's trap runs at once
    # a product, not ^: Debian's static busybox builds its awk without the math library
    awk -v lr="$lr" -v epoch="$epoch" 'BEGIN { printf "epoch=%d loss=%.4f\n", epoch, (1 + 100 * (lr - 0.1) * (lr - 0.1)) / epoch }'
    epoch=$((epoch + 1))
done
