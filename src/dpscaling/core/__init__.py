"""What every stage shares and no stage owns: the error a user can fix (:mod:`.errors`), atomic and
resumable file writing (:mod:`.io`), job logs (:mod:`.logs`) and the streams a job writes to (:mod:`.streams`)."""
