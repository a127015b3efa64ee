"""The S3 administrator's side of tests/test_object_stores.py, run by moto's own environment
(tests/servers/moto_env.py) with boto3: users, keys, buckets and objects on a moto server.

    python moto_admin.py ENDPOINT setup                       # prints the admin key (JSON)
    python moto_admin.py ENDPOINT reader-key ADMIN_JSON USER  # a new key of a reader (JSON)
    python moto_admin.py ENDPOINT revoke ADMIN_JSON USER KEY_ID
    python moto_admin.py ENDPOINT put ADMIN_JSON BUCKET KEY FILE
"""

import json
import sys

import boto3

REGION = "us-east-1"


def client(endpoint, service, admin=None):
    keys = admin or {"id": "setup", "secret": "setup"}
    return boto3.client(service, endpoint_url=endpoint, region_name=REGION, aws_access_key_id=keys["id"],
                        aws_secret_access_key=keys["secret"])


def main(endpoint, command, *args):
    if command == "setup":
        # moto's first requests are not authenticated (INITIAL_NO_AUTH_ACTION_COUNT=3): these three.
        iam = client(endpoint, "iam")
        iam.create_user(UserName="admin")
        iam.put_user_policy(UserName="admin", PolicyName="all", PolicyDocument=json.dumps({
            "Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}))
        key = iam.create_access_key(UserName="admin")["AccessKey"]
        admin = {"id": key["AccessKeyId"], "secret": key["SecretAccessKey"]}
        print(json.dumps(admin))
        return
    admin = json.loads(args[0])
    if command == "reader-key":
        # A reader (args[1]) that may only get objects, made on its first key; IAM allows two keys a user.
        iam = client(endpoint, "iam", admin)
        try:
            iam.create_user(UserName=args[1])
            iam.put_user_policy(UserName=args[1], PolicyName="read", PolicyDocument=json.dumps({
                "Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "s3:GetObject", "Resource": "*"}]}))
        except iam.exceptions.EntityAlreadyExistsException:
            pass
        key = iam.create_access_key(UserName=args[1])["AccessKey"]
        print(json.dumps({"AWS_ACCESS_KEY_ID": key["AccessKeyId"], "AWS_SECRET_ACCESS_KEY": key["SecretAccessKey"]}))
    elif command == "revoke":
        client(endpoint, "iam", admin).delete_access_key(UserName=args[1], AccessKeyId=args[2])
    elif command == "put":
        bucket, key, path = args[1:4]
        s3 = client(endpoint, "s3", admin)
        try:
            s3.create_bucket(Bucket=bucket)
        except s3.exceptions.BucketAlreadyOwnedByYou:
            pass
        with open(path, "rb") as f:
            s3.put_object(Bucket=bucket, Key=key, Body=f.read())
    else:
        raise SystemExit(f"unknown command {command}")


if __name__ == "__main__":
    main(*sys.argv[1:])
